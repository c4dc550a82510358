"""Usage per key, kept in SQLite so that neither a restart nor `kill -9` loses a completed
request's usage, and none is counted twice.

Each request is one row, keyed by its id (a second write of the same request changes
nothing), written and committed before the client sees the request complete: with the
write-ahead log, a commit is in the operating system's hands when it returns, so a crash of
this process cannot lose it. Refusals (429s) are counted per key, model, minute and code.
Figures are summed from the rows when asked (`GET /v1/usage`), and the day's and month's
sums seed the token budgets when the server starts.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    key_name TEXT NOT NULL,
    model TEXT NOT NULL,
    finished_at REAL NOT NULL,
    day TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    drafted_tokens INTEGER NOT NULL,
    accepted_tokens INTEGER NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_by_key_day ON requests (key_name, day);
CREATE INDEX IF NOT EXISTS requests_by_time ON requests (finished_at);
CREATE TABLE IF NOT EXISTS refusals (
    key_name TEXT NOT NULL,
    model TEXT NOT NULL,
    minute REAL NOT NULL,
    code TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (key_name, model, minute, code)
);
"""


@dataclass(frozen=True)
class UsageRecord:
    request_id: str
    key_name: str
    model: str
    finished_at: float  # Unix seconds
    prompt_tokens: int
    completion_tokens: int
    drafted_tokens: int
    accepted_tokens: int
    outcome: str


@dataclass(frozen=True)
class UsageRow:
    """One bucket's figures for one key and model."""

    bucket_start: int
    key_name: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    drafted_tokens: int
    accepted_tokens: int
    rate_limited: int = 0


def utc_day(unix_seconds: float) -> str:
    return datetime.fromtimestamp(unix_seconds, UTC).strftime("%Y-%m-%d")


class UsageLedger:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # One connection, used from the event loop's thread and, for reads, from others.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL: a commit survives the process's crash (not the machine's power loss).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=5000")  # other processes on the same file
            self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def record(self, usage: UsageRecord) -> bool:
        """Keep one finished request's usage; False when it was kept already."""
        with self._transaction() as db:
            written = db.execute(
                "INSERT OR IGNORE INTO requests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    usage.request_id,
                    usage.key_name,
                    usage.model,
                    usage.finished_at,
                    utc_day(usage.finished_at),
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.drafted_tokens,
                    usage.accepted_tokens,
                    usage.outcome,
                ),
            )
            return written.rowcount == 1

    def refused(self, key_name: str, model: str, code: str, at: float) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO refusals VALUES (?, ?, ?, ?, 1) ON CONFLICT "
                "(key_name, model, minute, code) DO UPDATE SET count = count + 1",
                (key_name, model, at // 60 * 60, code),
            )

    def spent(self, key_name: str, period: str) -> int:
        """Prompt and completion tokens a key used in a UTC day (2026-12-07) or month (2026-12)."""
        with self._lock:
            found = self._db.execute(
                "SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM requests "
                "WHERE key_name = ? AND day LIKE ?",
                (key_name, f"{period}%"),
            ).fetchone()
        return int(found[0])

    def usage(
        self, start: float, end: float, bucket_seconds: int, key_name: str | None = None
    ) -> list[UsageRow]:
        """Per bucket (aligned to multiples of its width in Unix time, a whole number of
        minutes), key and model, in that order."""
        keyed = "" if key_name is None else " AND key_name = ?"
        args = [start, end] if key_name is None else [start, end, key_name]
        bucket = f"CAST({{}} / {int(bucket_seconds)} AS INTEGER) * {int(bucket_seconds)}"
        with self._lock:
            served = self._db.execute(
                f"SELECT {bucket.format('finished_at')}, key_name, model, COUNT(*), "
                "SUM(prompt_tokens), SUM(completion_tokens), SUM(drafted_tokens), "
                "SUM(accepted_tokens) FROM requests "
                f"WHERE finished_at >= ? AND finished_at < ?{keyed} GROUP BY 1, 2, 3",
                args,
            ).fetchall()
            refused = self._db.execute(
                f"SELECT {bucket.format('minute')}, key_name, model, SUM(count) FROM refusals "
                f"WHERE minute >= ? AND minute < ?{keyed} GROUP BY 1, 2, 3",
                args,
            ).fetchall()
        rows = {(b, k, m): [b, k, m, *figures, 0] for b, k, m, *figures in served}
        for b, k, m, count in refused:
            rows.setdefault((b, k, m), [b, k, m, 0, 0, 0, 0, 0, 0])[-1] = count
        return [UsageRow(*rows[at]) for at in sorted(rows)]
