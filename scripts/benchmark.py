"""Throughput and acceptance per engine, per workload, against a specgate server.

    python -m scripts.benchmark --start            # starts `python -m app`, times start-up too
    python -m scripts.benchmark --url http://host:8000

Each case runs once to warm up, then `--repeats` times, alternating engines within each
repeat so drift on a noisy machine hits both alike. Reports medians and the ratio
speculative/plain measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.engine.prompts import CODE, JSON_CONTINUATION, MODEL

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


def run_once(client: httpx.Client, path: str, body: dict[str, Any], header: str) -> Samples:
    started = time.perf_counter()
    response = client.post(
        path,
        json={"model": MODEL, "max_tokens": ARGS.max_tokens, **body},
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


def start_server(port: int) -> tuple[subprocess.Popen[bytes], float]:
    repo = Path(__file__).resolve().parents[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--port", str(port)],
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    started = time.monotonic()
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process, time.monotonic() - started
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            raise SystemExit("server exited during start-up")
        time.sleep(0.5)


def main() -> None:
    process = None
    url = ARGS.url
    if ARGS.start:
        process, startup = start_server(ARGS.port)
        url = f"http://127.0.0.1:{ARGS.port}"
        print(f"start-up to healthy (both engines): {startup:.1f} s")
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            print(f"max_tokens={ARGS.max_tokens}, repeats={ARGS.repeats} after 1 warm-up")
            print("| case | plain tok/s | speculative tok/s | spec/plain | acceptance |")
            print("|---|---|---|---|---|")
            for name, (path, body) in CASES.items():
                for header in ("off", "on"):
                    run_once(client, path, body, header)
                results = {"off": Samples(), "on": Samples()}
                for _ in range(ARGS.repeats):
                    for header in ("off", "on"):
                        sample = run_once(client, path, body, header)
                        results[header].tokens_per_second += sample.tokens_per_second
                        results[header].acceptance += sample.acceptance
                        results[header].tokens += sample.tokens
                plain = statistics.median(results["off"].tokens_per_second)
                spec = statistics.median(results["on"].tokens_per_second)
                acceptance = statistics.median(results["on"].acceptance or [0.0])
                print(
                    f"| {name} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f} | {acceptance:.2f} |"
                )
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--start", action="store_true", help="start a server and time it")
    parser.add_argument("--port", type=int, default=8077)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    ARGS = parser.parse_args()
    main()
