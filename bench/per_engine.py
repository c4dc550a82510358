"""Throughput and acceptance per engine, per workload, against a specgate server.

    python -m bench.per_engine --start            # starts `python -m app`, times start-up too
    python -m bench.per_engine --url http://host:8000

Each case runs once to warm up, then `--repeats` times, alternating engines within each
repeat so drift on a noisy machine hits both alike. Reports medians and the ratio
speculative/plain measured in the same run, and writes them with the manifest (and the
server's log, with --start) to bench/results/per_engine/<run id>/ (or `--out-dir`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.embedded_model import MODEL_NAME as MODEL
from bench.manifest import recorded_run
from bench.prompt_set import CODE, JSON_CONTINUATION
from bench.servers import REPO, serve, specgate_spec

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "json continuation (T=0)": (
        "/v1/completions",
        {"prompt": JSON_CONTINUATION, "temperature": 0},
    ),
    "code: prime function (T=0)": (
        "/v1/chat/completions",
        {
            "messages": CODE,
            "temperature": 0,
        },
    ),
    "poem (T=1, seed 1)": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Write a surreal poem about a clock."}],
            "temperature": 1.0,
            "seed": 1,
        },
    ),
}


@dataclass
class Samples:
    tokens_per_second: list[float] = field(default_factory=list)
    acceptance: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


def run_once(
    client: httpx.Client, path: str, body: dict[str, Any], header: str, max_tokens: int
) -> Samples:
    started = time.perf_counter()
    response = client.post(
        path,
        json={"model": MODEL, "max_tokens": max_tokens, **body},
        headers={"X-Speculative": header},
    )
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    usage = response.json()["usage"]
    samples = Samples()
    samples.tokens_per_second.append(usage["completion_tokens"] / elapsed)
    samples.tokens.append(usage["completion_tokens"])
    spec = usage.get("speculative_decoding")
    if spec:
        samples.acceptance.append(spec["acceptance_rate"])
    return samples


def measure(url: str, repeats: int, max_tokens: int) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    with httpx.Client(base_url=url, timeout=600) as client:
        print(f"max_tokens={max_tokens}, repeats={repeats} after 1 warm-up")
        print("| case | plain tok/s | speculative tok/s | spec/plain | acceptance |")
        print("|---|---|---|---|---|")
        for name, (path, body) in CASES.items():
            for header in ("off", "on"):
                run_once(client, path, body, header, max_tokens)
            results = {"off": Samples(), "on": Samples()}
            for _ in range(repeats):
                for header in ("off", "on"):
                    sample = run_once(client, path, body, header, max_tokens)
                    results[header].tokens_per_second += sample.tokens_per_second
                    results[header].acceptance += sample.acceptance
                    results[header].tokens += sample.tokens
            plain = statistics.median(results["off"].tokens_per_second)
            spec = statistics.median(results["on"].tokens_per_second)
            acceptance = statistics.median(results["on"].acceptance or [0.0])
            table[name] = {
                "plain_tokens_per_s": plain,
                "speculative_tokens_per_s": spec,
                "speculative_over_plain": spec / plain,
                "acceptance": acceptance,
            }
            print(f"| {name} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f} | {acceptance:.2f} |")
    return table


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.per_engine", description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--start", action="store_true", help="start a server and time it")
    parser.add_argument("--port", type=int, default=8077)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--startup-timeout", type=float, default=900.0, metavar="SECONDS")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/per_engine/<run id>/"
    )
    args = parser.parse_args(argv)
    with recorded_run("bench.per_engine", args.out_dir, argv) as run, ExitStack() as stack:
        url = args.url
        document: dict[str, Any] = {"command": run.command, "url": url}
        if args.start:
            spec = specgate_spec(REPO, [])
            server = stack.enter_context(
                serve(spec, args.port, run.folder / "logs", args.startup_timeout)
            )
            url = document["url"] = server.base_url
            document["startup_s"] = round(server.startup_s, 1)
            print(f"start-up to healthy (both engines): {server.startup_s:.1f} s")
        document["max_tokens"], document["repeats"] = args.max_tokens, args.repeats
        document["cases"] = measure(url, args.repeats, args.max_tokens)
        (run.folder / "results.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
