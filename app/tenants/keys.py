"""API keys with names, weights and limits: the key ring, read from flags and the key file.

The key file is one key a line (blank lines and # comments skipped), as it always was, or TOML
that people edit by hand, one `[[key]]` table per client:

    [[key]]
    name = "alpha"                # in metrics, logs and usage; never the key itself
    key = "sk-alpha-..."          # or sha256 = "<the key's SHA-256, 64 hex digits>"
    weight = 2                    # its share of the engine when clients contend (default 1)
    admin = true                  # may read every key's usage (default false)
    requests_per_minute = 60      # each limit is optional
    tokens_per_minute = 20000
    max_in_flight = 8
    tokens_per_day = 1000000
    tokens_per_month = 20000000

A file whose first line that is neither blank nor a comment opens with `[` is TOML. Only the
keys' SHA-256 digests are kept: a presented key is hashed and compared with every digest in
constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class KeyLimits:
    """What one key may use; None is no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_in_flight: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None


@dataclass(frozen=True)
class ApiKey:
    name: str
    digest: str = field(repr=False)
    weight: float = 1.0
    admin: bool = False
    limits: KeyLimits = KeyLimits()


class KeyFileError(ValueError):
    """A key file that cannot be used, with the line at fault (1-based; 0 when none is)."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        where = f"{path}, line {line}" if line else str(path)
        super().__init__(f"{where}: {message}")
        self.line = line


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def unnamed(digest: str) -> str:
    # A key given without a name is known by its digest's first 8 hex digits.
    return f"key-{digest[:8]}"


@dataclass(frozen=True)
class KeyRing:
    keys: tuple[ApiKey, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keys)

    def find(self, presented: bytes) -> ApiKey | None:
        """The key presented (as sent, UTF-8), or None. Compares with every key in constant
        time, so timing reveals neither which key matched nor how much of one did."""
        wanted = hashlib.sha256(presented).hexdigest().encode()
        found = None
        for key in self.keys:
            if hmac.compare_digest(wanted, key.digest.encode()):
                found = key
        return found

    def named(self, name: str) -> ApiKey | None:
        return next((key for key in self.keys if key.name == name), None)


PositiveInt = Annotated[int, Field(ge=1)]


class _Entry(BaseModel):
    """One [[key]] table, as written."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    key: str | None = Field(None, min_length=1)
    sha256: str | None = None
    weight: float = Field(1.0, gt=0, le=1000)
    admin: bool = False
    requests_per_minute: PositiveInt | None = None
    tokens_per_minute: PositiveInt | None = None
    max_in_flight: PositiveInt | None = None
    tokens_per_day: PositiveInt | None = None
    tokens_per_month: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_key(self) -> _Entry:
        if (self.key is None) == (self.sha256 is None):
            raise ValueError("give the key as exactly one of key or sha256")
        if self.sha256 is not None and not HEX_DIGEST.match(self.sha256.lower()):
            raise ValueError("sha256 must be 64 hex digits")
        return self

    def api_key(self) -> ApiKey:
        digest = self.sha256.lower() if self.sha256 is not None else digest_of(self.key or "")
        limits = KeyLimits(
            self.requests_per_minute,
            self.tokens_per_minute,
            self.max_in_flight,
            self.tokens_per_day,
            self.tokens_per_month,
        )
        return ApiKey(self.name or unnamed(digest), digest, self.weight, self.admin, limits)


def read_key_file(path: Path) -> list[ApiKey]:
    """The keys a file holds; raises KeyFileError naming the line at fault."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KeyFileError(path, 0, f"cannot be read ({exc.strerror})") from None
    lines = text.splitlines()
    first = next((ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    if not first.startswith("["):
        return [_plain(line) for line in lines if line.strip() and not line.startswith("#")]
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise KeyFileError(path, int(found.group(1)) if found else 0, str(exc)) from None
    if set(document) != {"key"} or not isinstance(document["key"], list):
        raise KeyFileError(path, 1, "expected only [[key]] tables")
    keys = []
    for index, table in enumerate(document["key"]):
        try:
            keys.append(_Entry.model_validate(table).api_key())
        except ValidationError as exc:
            problem = exc.errors()[0]
            name = str(problem["loc"][0]) if problem["loc"] else None
            where = _line_of(lines, index, name)
            label = f"{name}: " if name else ""
            message = f"[[key]] {index + 1}: {label}{problem['msg']}"
            raise KeyFileError(path, where, message) from None
    return keys


def _plain(line: str) -> ApiKey:
    digest = digest_of(line.strip())
    return ApiKey(unnamed(digest), digest)


def _line_of(lines: Sequence[str], table: int, name: str | None) -> int:
    """The line of the table's field `name` (or of its header), 1-based."""
    headers = [i for i, line in enumerate(lines) if re.match(r"^\s*\[\[\s*key\s*\]\]", line)]
    if table >= len(headers):
        return 0
    start = headers[table]
    end = headers[table + 1] if table + 1 < len(headers) else len(lines)
    if name is not None:
        for i in range(start, end):
            if re.match(rf"^\s*{re.escape(name)}\s*=", lines[i]):
                return i + 1
    return start + 1


def key_ring(flag_keys: Iterable[str], path: Path | None) -> KeyRing:
    """The flags' keys and the file's, checked: names and keys each appear once."""
    keys = [_plain(key) for key in flag_keys]
    if path is not None:
        keys += read_key_file(path)
    names: set[str] = set()
    digests: set[str] = set()
    for key in keys:
        if key.name in names:
            raise KeyFileError(path or Path("--api-key"), 0, f"the name {key.name} is used twice")
        if key.digest in digests:
            raise KeyFileError(path or Path("--api-key"), 0, f"{key.name}'s key is given twice")
        names.add(key.name)
        digests.add(key.digest)
    return KeyRing(tuple(keys))
