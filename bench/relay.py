"""The gateway's own ceiling: streamed tokens/s direct from a fast upstream and through specgate.

`python -m bench.relay` starts three servers and measures, at
each concurrency, in one run and interleaved (so drift hits every path alike):

| path | what the client talks to |
|---|---|
| `direct` | `bench.stream_upstream`, a minimal OpenAI-compatible server streaming instantly |
| `relay` | specgate with that server as both pools (`X-Speculative: off`): the remote route |
| `embedded` | specgate's HTTP layer over fake engines that produce tokens instantly, on one core |
| `relay-bare` | `relay` with no keys and no usage ledger: the gateway without its tenants' books |
| `relay-keys` | `relay` with a key file of limits that never bind, and the usage ledger |

Each phase sends `--streams` chat streams of `--tokens` tokens (after a warm-up of one stream
per connection), `c` at a time, and reports aggregate tokens/s, the p50/p99 delay between
successive reads that brought data, tokens per event, and the CPU time the server (its
process tree) spent per token. `relay / direct` is taken per repeat, then the median.
Writes results.json, the manifest and the servers' logs to bench/results/relay/<run id>/ (or
`--out-dir`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bench.manifest import recorded_run
from bench.servers import ServerProcess, ServerSpec, free_port, serve
from bench.stream_client import StreamResult, chat_request, stream_once

logger = logging.getLogger("bench.relay")

REPO = Path(__file__).resolve().parent.parent
PATHS = ("direct", "relay", "embedded", "relay-bare", "relay-keys")
DEFAULT_PATHS = ("direct", "relay", "embedded")
KEY = "sk-relay-bench"
# Limits far above what a run sends: each request is checked, counted and recorded.
KEY_FILE = f"""[[key]]
name = "bench"
key = "{KEY}"
requests_per_minute = 100000000
tokens_per_minute = 100000000000
max_in_flight = 100000
tokens_per_day = 100000000000000
"""


@dataclass
class Phase:
    path: str
    concurrency: int
    repeat: int
    streams: int
    tokens: int
    events: int
    seconds: float
    tokens_per_s: float
    gap_p50_ms: float
    gap_p99_ms: float
    # CPU seconds per token of the server the client talked to (its whole process tree).
    server_cpu_us_per_token: float
    # The median stream's seconds from request to end, in ms.
    seconds_p50_ms: float = 0.0


async def run_phase(
    server: ServerProcess,
    concurrency: int,
    streams: int,
    tokens: int,
    model: str,
    keyed: bool = False,
) -> tuple[list[StreamResult], float, float]:
    """The phase's streams, its seconds, and the server's CPU seconds while it ran."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "count"}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"x-speculative": "off"}
    if keyed:
        headers["authorization"] = f"Bearer {KEY}"
    request = chat_request("127.0.0.1", server.port, body, headers)
    left = streams
    results: list[StreamResult] = []

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            results.append(await stream_once("127.0.0.1", server.port, request))

    # Warm-up: one stream per worker, unrecorded (connections, caches, the learner's priors).
    await asyncio.gather(
        *(stream_once("127.0.0.1", server.port, request) for _ in range(concurrency))
    )
    cpu_before = cpu_seconds(server)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return results, elapsed, cpu_seconds(server) - cpu_before


def cpu_seconds(server: ServerProcess) -> float:
    """User + system CPU time of the server and its children so far."""
    process = psutil.Process(server.process.pid)
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        times = member.cpu_times()
        total += times.user + times.system
    return total


def summarize(
    path: str,
    concurrency: int,
    repeat: int,
    results: list[StreamResult],
    seconds: float,
    server_cpu: float,
) -> Phase:
    gaps = sorted(gap for result in results for gap in result.gaps)
    tokens = sum(result.tokens for result in results)
    return Phase(
        path=path,
        concurrency=concurrency,
        repeat=repeat,
        streams=len(results),
        tokens=tokens,
        events=sum(result.events for result in results),
        seconds=round(seconds, 3),
        tokens_per_s=round(tokens / seconds, 1),
        gap_p50_ms=round(_quantile(gaps, 0.50) * 1000, 3),
        gap_p99_ms=round(_quantile(gaps, 0.99) * 1000, 3),
        server_cpu_us_per_token=round(server_cpu / max(1, tokens) * 1e6, 2),
        seconds_p50_ms=round(statistics.median(r.seconds for r in results) * 1000, 3)
        if results
        else 0.0,
    )


def _quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def server_specs(
    upstream_url: str, workers: int, embedded_cpu: int, folder: Path
) -> dict[str, ServerSpec]:
    python = sys.executable
    specgate = [python, "-m", "app", "--plain-upstreams", upstream_url]
    specgate += ["--speculative-upstreams", upstream_url, "--upstream-model", "relay-bench"]
    specgate += ["--log-level", "warning"]
    if workers > 1:
        specgate += ["--workers", str(workers)]
    embedded = [python, "-m", "bench.fake_engine_server", "--cpu", str(embedded_cpu)]
    keys = folder / "keys.toml"
    keys.parent.mkdir(parents=True, exist_ok=True)
    keys.write_text(KEY_FILE)
    keyed = ["--api-key-file", str(keys), "--usage-ledger-path", str(folder / "usage.sqlite3")]
    return {
        "relay": ServerSpec("specgate-relay", specgate, REPO),
        "relay-bare": ServerSpec("specgate-relay-bare", [*specgate, "--no-usage-ledger"], REPO),
        "relay-keys": ServerSpec("specgate-relay-keys", [*specgate, *keyed], REPO),
        "embedded": ServerSpec("specgate-fake-engines", embedded, REPO),
    }


def report(phases: list[Phase], levels: list[int]) -> dict[str, object]:
    summary: dict[str, object] = {}
    for level in levels:
        at_level = [phase for phase in phases if phase.concurrency == level]
        by_path = {path: [phase for phase in at_level if phase.path == path] for path in PATHS}
        row: dict[str, object] = {}
        for path, runs in by_path.items():
            if runs:
                row[path] = {
                    "tokens_per_s": statistics.median(run.tokens_per_s for run in runs),
                    "gap_p50_ms": statistics.median(run.gap_p50_ms for run in runs),
                    "gap_p99_ms": statistics.median(run.gap_p99_ms for run in runs),
                    "server_cpu_us_per_token": statistics.median(
                        run.server_cpu_us_per_token for run in runs
                    ),
                    "tokens_per_event": round(
                        sum(run.tokens for run in runs) / max(1, sum(run.events for run in runs)), 2
                    ),
                }
        ratios = [
            relay.tokens_per_s / direct.tokens_per_s
            for relay, direct in zip(by_path["relay"], by_path["direct"], strict=False)
        ]
        if ratios:
            row["relay_over_direct"] = round(statistics.median(ratios), 3)
        # The tenants' books (keys, limits, ledger): their share of tokens/s and their added
        # median seconds per stream, round by round.
        paired = list(zip(by_path["relay-keys"], by_path["relay-bare"], strict=False))
        if paired:
            row["keys_over_bare"] = round(
                statistics.median(k.tokens_per_s / b.tokens_per_s for k, b in paired), 3
            )
            row["keys_added_ms_p50"] = round(
                statistics.median(k.seconds_p50_ms - b.seconds_p50_ms for k, b in paired), 3
            )
        summary[str(level)] = row
    return summary


def print_table(summary: dict[str, object]) -> None:
    header = f"{'c':>4} {'path':>9} {'tok/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'tok/event':>9}"
    print(f"{header} {'cpu us/tok':>10}")
    for level, row in summary.items():
        assert isinstance(row, dict)
        for path in PATHS:
            if path in row:
                f = row[path]
                print(
                    f"{level:>4} {path:>9} {f['tokens_per_s']:>9.0f} {f['gap_p50_ms']:>8.3f} "
                    f"{f['gap_p99_ms']:>8.3f} {f['tokens_per_event']:>9.2f} "
                    f"{f['server_cpu_us_per_token']:>10.1f}"
                )
        if "relay_over_direct" in row:
            print(f"{level:>4} relay / direct = {row['relay_over_direct']:.3f}")
        if "keys_over_bare" in row:
            print(
                f"{level:>4} relay-keys / relay-bare = {row['keys_over_bare']:.3f} tokens/s, "
                f"{row['keys_added_ms_p50']:+.3f} ms a stream (median)"
            )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--streams", type=int, default=0, help="per phase (default max(32, 4c))")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS), help=", ".join(PATHS))
    parser.add_argument("--workers", type=int, default=1, help="specgate processes (relay)")
    parser.add_argument("--embedded-cpu", type=int, default=1, help="core for the embedded path")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/relay/<run id>/"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    levels = [int(level) for level in args.concurrency.split(",")]
    paths = [path for path in args.paths.split(",") if path]
    with recorded_run("bench.relay", args.out_dir, argv) as run:
        phases = measure(args, levels, paths, run.folder / "logs")
        summary = report(phases, levels)
        print_table(summary)
        document = {
            "command": run.command,
            "summary": summary,
            "phases": [asdict(p) for p in phases],
        }
        (run.folder / "results.json").write_text(json.dumps(document, indent=1) + "\n")
        logger.info("wrote %s", run.folder / "results.json")


def measure(
    args: argparse.Namespace, levels: list[int], paths: list[str], log_dir: Path
) -> list[Phase]:
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    upstream_argv = [sys.executable, "-m", "bench.stream_upstream", "--tokens", str(args.tokens)]
    specs = server_specs(upstream_url, args.workers, args.embedded_cpu, log_dir.parent)
    phases: list[Phase] = []
    with ExitStack() as stack:
        upstream = ServerSpec("stream-upstream", upstream_argv, REPO)
        servers = {"direct": stack.enter_context(serve(upstream, upstream_port, log_dir, 30))}
        for path in PATHS[1:]:
            if path in paths:
                servers[path] = stack.enter_context(serve(specs[path], free_port(), log_dir, 60))
        model = {path: "relay-bench" for path in PATHS}
        model["embedded"] = "SmolLM2-135M-Instruct"
        for repeat in range(args.repeats):
            for level in levels:
                streams = args.streams or max(32, 4 * level)
                for path in paths:
                    results, seconds, cpu = asyncio.run(
                        run_phase(
                            servers[path],
                            level,
                            streams,
                            args.tokens,
                            model[path],
                            keyed=path == "relay-keys",
                        )
                    )
                    phase = summarize(path, level, repeat, results, seconds, cpu)
                    logger.info("%s", phase)
                    phases.append(phase)
    return phases


if __name__ == "__main__":
    main()
