"""Two tenants, one flooding (issue 43): what one key's flood does to another's latency and
share, before and after fair admission, each arm a fresh server on both cores.

    python -m bench.tenant_flood --repeats 3                    # before (a commit) and after
    python -m bench.tenant_flood --arms after --flood-seconds 10 # a quick look

Two API keys of equal weight. Each arm runs three phases, chat completions of a fixed length
(`ignore_eos`), greedy:
1. quiet: key B alone, one request every `--b-interval` seconds;
2. flood: key A open-loop at `--flood-rate` a second (several times what the engine serves)
   while B goes on as before; B's latencies here are against its quiet ones;
3. both waiting: A open-loop at `--flood-rate`, B at `--both-b-rate` (less than A, but more
   than half of what the engine serves: both want more than a fair share); each key's share of
   the tokens served while both had requests waiting for their first token (streamed, so
   that the wait is seen). First come, first served gives B its share of the requests sent;
   fair admission gives it half.

Arms: `before` runs the code at `--before` (a git worktree of that commit, the same venv), with
no fairness; `after` this tree's; `after-N` this tree's with `--max-running-requests N` (the
batch bounded: on a CPU a step's cost grows with every sequence in it, so B's own speed
depends on how many of A's run beside it, whatever the order of the queue).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import repeats
from bench.client import sse_payloads
from bench.manifest import recorded_run
from bench.report import percentile
from bench.servers import REPO, ServerError, free_port, serve, specgate_spec

logger = logging.getLogger("bench.tenant_flood")

KEYS = {"A": "sk-flood-alpha", "B": "sk-flood-beta"}
# Each request asks about its own pair (no two alike within a run): a repeated prompt would
# let the suffix trees of earlier answers draft it whole, and time nothing but that.
WHO = "lighthouse keeper|baker|pilot|gardener|violinist|miner|sailor|painter|clockmaker|nurse"
WHAT = "storm|lost key|red kite|broken bridge|letter|comet|fox|flood|old map|silver coin"
PAIRS = [(who, what) for who in WHO.split("|") for what in WHAT.split("|")]


def prompt(phase: str, key: str, index: int) -> str:
    who, what = PAIRS[(zlib.crc32(f"{phase}{key}".encode()) % 7 + index * 13) % len(PAIRS)]
    return f"Write a short story about a {who} and a {what}. Request {key}{index}."


@dataclass(frozen=True)
class Done:
    arm: str
    repeat: int
    phase: str
    key: str
    sent_at: float  # seconds since the phase started
    seconds: float
    status: int
    tokens: int
    finished_at: float  # seconds since the phase started
    # When its first token arrived, seconds since the phase started (streamed requests only).
    first_token_at: float | None = None


async def one(
    client: httpx.AsyncClient,
    arm: str,
    repeat: int,
    phase: str,
    key: str,
    t0: float,
    tokens: int,
    index: int = 0,
    stream: bool = False,
) -> Done:
    sent = time.perf_counter()
    body: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": prompt(phase, key, index)}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    headers = {"Authorization": f"Bearer {KEYS[key]}"}
    first: float | None = None
    try:
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            status, used, first = await _streamed(client, body, headers)
        else:
            answer = await client.post("/v1/chat/completions", json=body, headers=headers)
            status = answer.status_code
            used = answer.json()["usage"]["completion_tokens"] if status == 200 else 0
    except httpx.HTTPError:
        status, used = 0, 0
    done = time.perf_counter()
    first_at = first - t0 if first is not None else None
    return Done(arm, repeat, phase, key, sent - t0, done - sent, status, used, done - t0, first_at)


async def _streamed(
    client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, int, float | None]:
    """(status, completion tokens, when the first content arrived) of one streamed request."""
    first: float | None = None
    used = 0
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as answer:
        if answer.status_code != 200:
            await answer.aread()
            return answer.status_code, 0, None
        async for event in sse_payloads(answer):
            if first is None and any(c["delta"].get("content") for c in event["choices"]):
                first = time.perf_counter()
            if event.get("usage"):
                used = int(event["usage"]["completion_tokens"])
    return 200, used, first


async def open_loop(
    client: httpx.AsyncClient,
    arm: str,
    repeat: int,
    phase: str,
    key: str,
    rate: float,
    seconds: float,
    t0: float,
    tokens: int,
    stream: bool = False,
) -> list[Done]:
    """Requests at `rate` a second for `seconds`, each on its own: the sender never waits."""
    tasks = []
    count = int(seconds * rate)
    for i in range(count):
        await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        request = one(client, arm, repeat, phase, key, t0, tokens, index=i, stream=stream)
        tasks.append(asyncio.create_task(request))
    return list(await asyncio.gather(*tasks))


async def run_arm(base_url: str, arm: str, repeat: int, args: argparse.Namespace) -> list[Done]:
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        await one(client, arm, repeat, "warm-up", "B", time.perf_counter(), 8)
        found: list[Done] = []
        t0 = time.perf_counter()
        b_rate = 1 / args.b_interval
        found += await open_loop(
            client, arm, repeat, "quiet", "B", b_rate, args.quiet_seconds, t0, args.tokens
        )
        t0 = time.perf_counter()
        flood, light = await asyncio.gather(
            open_loop(
                client,
                arm,
                repeat,
                "flood",
                "A",
                args.flood_rate,
                args.flood_seconds,
                t0,
                args.tokens,
            ),
            open_loop(
                client, arm, repeat, "flood", "B", b_rate, args.flood_seconds, t0, args.tokens
            ),
        )
        found += flood + light
        t0 = time.perf_counter()
        both = await asyncio.gather(
            *(
                open_loop(
                    client,
                    arm,
                    repeat,
                    "both",
                    key,
                    rate,
                    args.both_seconds,
                    t0,
                    args.tokens,
                    stream=True,
                )
                for key, rate in (("A", args.flood_rate), ("B", args.both_b_rate))
            )
        )
        found += both[0] + both[1]
    return found


def share_to_drain(done: Sequence[Done]) -> float | None:
    """B's share of the tokens finished while both keys still had requests unfinished.

    The first measure (the runs before 2026-12-08): on open loops it counts to the drain,
    long after the phase, so it mostly measures what each key sent minus what was refused.
    """
    mine = [d for d in done if d.phase == "both" and d.status == 200]
    if not mine:
        return None
    # Both wait until the first key's last request finishes.
    until = min(max(d.finished_at for d in mine if d.key == key) for key in ("A", "B"))
    served = {
        key: sum(d.tokens for d in mine if d.key == key and d.finished_at <= until)
        for key in ("A", "B")
    }
    total = served["A"] + served["B"]
    return served["B"] / total if total else None


Interval = tuple[float, float]


def _merged(intervals: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The times in both of two sorted, disjoint interval lists."""
    out = []
    for start_a, end_a in a:
        for start_b, end_b in b:
            start, end = max(start_a, start_b), min(end_a, end_b)
            if end > start:
                out.append((start, end))
    return out


def share_while_both_backlogged(done: Sequence[Done]) -> float | None:
    """B's share of the tokens served while both keys had a request waiting for its first
    token: the order in which the server takes waiting work, whatever each key sent.

    A request's tokens are counted as arriving evenly from its first token to its last.
    """
    mine = [
        d for d in done if d.phase == "both" and d.status == 200 and d.first_token_at is not None
    ]
    waiting = {
        key: _merged([(d.sent_at, d.first_token_at or 0.0) for d in mine if d.key == key])
        for key in ("A", "B")
    }
    window = _overlap(waiting["A"], waiting["B"])
    served = dict.fromkeys(("A", "B"), 0.0)
    for d in mine:
        start = d.first_token_at or 0.0
        length = d.finished_at - start
        inside = sum(end - begin for begin, end in _overlap([(start, d.finished_at)], window))
        served[d.key] += d.tokens * (inside / length if length > 0 else 0.0)
    total = served["A"] + served["B"]
    return served["B"] / total if total else None


def figures(done: Sequence[Done]) -> dict[str, Any]:
    def latencies(phase: str, key: str) -> list[float]:
        return [d.seconds for d in done if (d.phase, d.key, d.status) == (phase, key, 200)]

    quiet, flooded = latencies("quiet", "B"), latencies("flood", "B")
    out: dict[str, Any] = {
        "b_quiet_median": statistics.median(quiet) if quiet else None,
        "b_quiet_p90": percentile(quiet, 0.9),
        "b_flood_median": statistics.median(flooded) if flooded else None,
        "b_flood_p90": percentile(flooded, 0.9),
        "b_share_both": share_while_both_backlogged(done),
        "b_share_to_drain": share_to_drain(done),
        "refused": {
            f"{phase} {key}": sum(
                1 for d in done if (d.phase, d.key) == (phase, key) and d.status != 200
            )
            for phase in ("quiet", "flood", "both")
            for key in ("A", "B")
        },
    }
    if out["b_flood_p90"] and out["b_quiet_p90"]:
        out["b_p90_ratio"] = out["b_flood_p90"] / out["b_quiet_p90"]
    return out


def before_tree(commit: str) -> Path:
    """A worktree of `commit` in a scratch folder (not under the run's folder, which may be
    committed), sharing this tree's venv."""
    tree = Path(tempfile.mkdtemp(prefix="specgate-before-")) / commit[:8]
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-f", str(tree), commit],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    (tree / ".venv").symlink_to(REPO / ".venv")
    return tree


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.tenant_flood", description=__doc__)
    parser.add_argument("--arms", default="before,after", help="before, after, after-N")
    parser.add_argument("--before", default="e705fd5", help="the commit of the 'before' arm")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--b-interval", type=float, default=2.0)
    parser.add_argument("--flood-rate", type=float, default=12.0)
    parser.add_argument("--both-b-rate", type=float, default=6.0)
    parser.add_argument("--quiet-seconds", type=float, default=20.0)
    parser.add_argument("--flood-seconds", type=float, default=30.0)
    parser.add_argument("--both-seconds", type=float, default=20.0)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    with recorded_run("bench.tenant_flood", args.out_dir, argv) as run:
        keys = run.folder / "keys"
        keys.write_text("".join(f"{key}\n" for key in KEYS.values()))
        old = before_tree(args.before) if "before" in arms else None
        done: list[Done] = []
        for repeat, arm in repeats.interleaved(arms, args.repeats):
            flags = ["--api-key-file", str(keys), "--routing-exploration", "0"]
            tree = REPO
            if arm == "before":
                assert old is not None
                tree = old
            else:
                flags += ["--usage-ledger-path", str(run.folder / f"usage-{arm}-{repeat}.sqlite3")]
                if arm.startswith("after-"):
                    flags += ["--max-running-requests", arm.split("-", 1)[1]]
            spec = specgate_spec(tree, flags, name=f"{arm}.r{repeat}")
            try:
                with serve(spec, free_port(), run.folder / "logs", 600) as server:
                    found = asyncio.run(run_arm(server.base_url, arm, repeat, args))
            except ServerError as exc:
                logger.error("%s", exc)
                continue
            done += found
            logger.info("%s round %d: %s", arm, repeat, figures(found))
        table = {
            f"{arm} r{r}": figures([d for d in done if (d.arm, d.repeat) == (arm, r)])
            for r, arm in repeats.interleaved(arms, args.repeats)
        }
        (run.folder / "results.json").write_text(
            json.dumps({"done": [asdict(d) for d in done], "figures": table}, indent=1)
        )
        (run.folder / "figures.json").write_text(json.dumps(table, indent=1) + "\n")
        print(json.dumps(table, indent=1))
        if old is not None:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=REPO, check=False
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
