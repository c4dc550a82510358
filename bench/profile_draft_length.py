"""Where a length-0 request's time goes: the worker of one shared engine against a plain engine.

For each layout a fresh specgate server runs; `--concurrency` sampled poems at a time go to
the plain route (in `one`: draft length 0 in the speculative engine) for `--seconds` while
py-spy samples that route's vLLM worker process (and, in `one`, its engine core). The
printout is each function's share of the samples, own time and with callees, so the two
layouts can be compared line by line; the shares, the raw profiles, the manifest and the
servers' logs go to bench/results/profile_draft_length/<run id>/ (or `--out-dir`). Needs
py-spy (`pip install py-spy`) and ptrace rights.

    python -m bench.profile_draft_length --concurrency 1 --seconds 40
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.embedded_model import MODEL_NAME
from bench.manifest import recorded_run
from bench.mixed_batch import POEM
from bench.servers import ServerProcess, free_port, serve, specgate_spec

REPO = Path(__file__).resolve().parents[1]


def route_processes(server: ServerProcess, layout: str) -> dict[str, int]:
    """The plain route's engine core and worker pids (in `two`, the second engine started)."""
    root = psutil.Process(server.process.pid)
    cores = [p for p in root.children() if "EngineCore" in " ".join(p.cmdline())]
    cores.sort(key=lambda p: p.create_time())
    # Both layouts start the speculative engine first; in `two` the plain one is second.
    core = cores[-1] if layout == "two" else cores[0]
    workers = [p for p in core.children(recursive=True) if "Worker" in " ".join(p.cmdline())]
    return {"core": core.pid, "worker": workers[0].pid}


async def keep_busy(base: str, concurrency: int, seconds: float) -> int:
    body = {"model": MODEL_NAME, "prompt": POEM, "max_tokens": 128, "temperature": 1.0}
    body["ignore_eos"] = True
    deadline = time.monotonic() + seconds
    tokens = 0

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal tokens
        while time.monotonic() < deadline:
            response = await client.post(
                f"{base}/v1/completions", json=body, headers={"X-Speculative": "off"}
            )
            response.raise_for_status()
            tokens += int(response.json()["usage"]["completion_tokens"])

    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
    return tokens


def shares(raw: Path) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """py-spy's collapsed stacks -> samples per function, own and inclusive, and the total."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.split(" (")[0] for frame in stack.split(";")]
        samples = int(count)
        total += samples
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    return own, inclusive, total


def profile(layout: str, concurrency: int, seconds: float, folder: Path) -> dict[str, Any]:
    args = ["--engine-layout", layout, "--routing-exploration", "0"]
    spec = specgate_spec(REPO, args, f"specgate-{layout}")
    with serve(spec, free_port(), folder / "logs", 600) as server:
        asyncio.run(keep_busy(server.base_url, concurrency, 10))  # warm-up
        pids = route_processes(server, layout)
        recordings = {}
        spies = []
        for name, pid in pids.items():
            out = folder / f"profile-{layout}-{name}.txt"
            command = ["py-spy", "record", "-p", str(pid), "-d", str(int(seconds))]
            command += ["-f", "raw", "-o", str(out), "-r", "200", "--nonblocking"]
            spies.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
            recordings[name] = out
        started = time.monotonic()
        tokens = asyncio.run(keep_busy(server.base_url, concurrency, seconds))
        elapsed = time.monotonic() - started
        for spy in spies:
            spy.wait(timeout=120)
    result: dict[str, Any] = {"tokens_per_s": tokens / elapsed}
    for name, out in recordings.items():
        own, inclusive, total = shares(out)
        result[name] = {
            "samples": total,
            "own": {f: n / total for f, n in own.most_common(15)},
            "inclusive": {f: n / total for f, n in inclusive.most_common(40)},
        }
    return result


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile_draft_length", description=__doc__
    )
    parser.add_argument("--layouts", default="two,one")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help="default: bench/results/profile_draft_length/<run id>/",
    )
    args = parser.parse_args(argv)
    with recorded_run("bench.profile_draft_length", args.out_dir, argv) as run:
        results = {
            layout: profile(layout, args.concurrency, args.seconds, run.folder)
            for layout in args.layouts.split(",")
        }
        for layout, result in results.items():
            print(f"\n## {layout}: {result['tokens_per_s']:.1f} tokens/s on the plain route")
            for name in ("worker", "core"):
                print(f"\n{name}, {result[name]['samples']} samples; inclusive share:")
                for function, share in result[name]["inclusive"].items():
                    print(f"  {share:6.1%}  {function}")
        (run.folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
