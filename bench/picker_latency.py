"""What specgate's picker adds to a request through Envoy: `python -m bench.picker_latency`.

The same two specgate servers (fake engines: tokens come at once, so the figure is the path's
own) behind one Envoy (bench/envoy_stack.py), reached two ways: through the picker (ext_proc
in the endpoint-picker protocol's mode, an ORIGINAL_DST cluster), and through Envoy's own
least-request balancing. Requests go one at a time, alternating between the two, so drift
on a shared machine falls on both alike. The picker's cost is the difference of the medians.

Writes bench/results/picker_latency/<run id>/ (or --out-dir): manifest.json, results.json with each
arm's latencies, summary.md; the servers' logs under logs/ (not kept in git).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from bench.envoy_stack import (
    Listener,
    envoy,
    envoy_config,
    picker_ready,
    start_picker,
    start_upstream,
    upstream_ready,
)
from bench.manifest import recorded_run
from bench.servers import free_port
from scripts.install_envoy import envoy_binary, install

MODEL = "SmolLM2-135M-Instruct"
# A chat turn of a few hundred bytes with code in it: the picker classifies it (code-edit)
# and tells the server to draft.
PROMPT = "Fix the bug in this function and explain it briefly:\n" + (
    "def total(items):\n    s = 0\n    for i in items:\n        s += i.price\n    return s\n" * 3
)
ARMS = ("picked", "balanced")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per arm, after the warm-up")
    parser.add_argument("--warmup", type=int, default=40, help="per arm, not counted")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--out-dir", type=Path)
    args = parser.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    binary = envoy_binary()
    if not binary.exists():
        binary = install()
    with recorded_run("bench.picker_latency", args.out_dir, argv) as run:
        latencies = measure(binary, run.folder / "logs", args.requests, args.warmup, args)
        results = {arm: summary(values) for arm, values in latencies.items()}
        added = results["picked"]["median_ms"] - results["balanced"]["median_ms"]
        run.notes["picker_added_median_ms"] = round(added, 3)
        (run.folder / "results.json").write_text(
            json.dumps({"summary": results, "latencies_ms": latencies}, indent=1) + "\n"
        )
        (run.folder / "summary.md").write_text(table(results, added, run.command))
        print(table(results, added, run.command))
    return 0


def measure(
    binary: Path, logs: Path, requests: int, warmup: int, args: argparse.Namespace
) -> dict[str, list[float]]:
    servers = [start_upstream(logs, f"upstream-{i}") for i in (1, 2)]
    try:
        for server in servers:
            upstream_ready(server)
        upstreams = [f"127.0.0.1:{server.port}" for server in servers]
        picker = start_picker(logs, upstreams, ["--step-cost", "cpu", "--log-level", "warning"])
        servers.append(picker)
        picker_ready(picker)
        ports = {arm: free_port() for arm in ARMS}
        listeners = [
            Listener("picked", ports["picked"]),
            Listener("balanced", ports["balanced"], picked=False),
        ]
        admin = free_port()
        config = envoy_config(admin, listeners, upstreams, picker.port)
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": args.max_tokens,
        }
        with envoy(binary, config, logs, admin), httpx.Client(timeout=30) as client:
            urls = {
                arm: f"http://127.0.0.1:{port}/v1/chat/completions" for arm, port in ports.items()
            }
            latencies: dict[str, list[float]] = {arm: [] for arm in ARMS}
            for index in range(warmup + requests):
                # Alternate which arm goes first, so neither always follows the other.
                order = ARMS if index % 2 == 0 else ARMS[::-1]
                for arm in order:
                    began = time.perf_counter()
                    response = client.post(urls[arm], json=body)
                    elapsed = (time.perf_counter() - began) * 1000
                    response.raise_for_status()
                    if index >= warmup:
                        latencies[arm].append(round(elapsed, 3))
            return latencies
    finally:
        for server in reversed(servers):
            server.stop(grace_s=10)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "requests": len(values),
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def table(results: dict[str, dict[str, float]], added: float, command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| arm | requests | median ms | p90 ms | mean ms |",
        "|---|---|---|---|---|",
    ]
    for arm, found in results.items():
        lines.append(
            f"| {arm} | {found['requests']:g} | {found['median_ms']:.2f} | "
            f"{found['p90_ms']:.2f} | {found['mean_ms']:.2f} |"
        )
    lines += ["", f"The picker adds {added:.2f} ms at the median.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
