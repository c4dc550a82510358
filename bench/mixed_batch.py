"""A mixed batch on both engines at once, under each CPU core layout (--engine-cpus).

For each layout, one fresh specgate server runs, each batch `--repeats` times after a warm-up:
one JSON continuation alone (speculative), one poem alone (plain), poems on the plain engine
beside JSON continuations on the speculative one, and the same batch all on the plain engine.
Every request asks for exactly `--max-tokens` tokens (`ignore_eos`). The wall time of each
batch is printed, min and max over the repeats, and written with the manifest and the
servers' logs to bench/results/mixed_batch/<run id>/ (or `--out-dir`).

    python -m bench.mixed_batch                       # split and shared, about 4 minutes
    python -m bench.mixed_batch --layouts split --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.embedded_model import MODEL_NAME
from bench.manifest import recorded_run
from bench.servers import free_port, serve, specgate_spec

REPO = Path(__file__).resolve().parents[1]
JSON_CONTINUATION = (
    "[\n"
    + "".join(
        f'  {{"id": {i}, "name": "user{i}", "email": "user{i}@example.com", "active": true}},\n'
        for i in range(1, 9)
    )
    + '  {"id": 9,'
)
POEM = "Write a surreal poem about a clock that melts into the sea."


@dataclass(frozen=True)
class Batch:
    name: str
    poems: int
    jsons: int
    json_route: str  # X-Speculative for the JSON continuations; poems always go plain


BATCHES = (
    Batch("one JSON continuation, speculative", 0, 1, "on"),
    Batch("one poem, plain", 1, 0, "off"),
    Batch("4 poems plain + 2 JSON speculative, at once", 4, 2, "on"),
    Batch("the same 6, all plain", 4, 2, "off"),
)


async def _one(client: httpx.AsyncClient, base: str, poem: bool, route: str, tokens: int) -> int:
    body: dict[str, Any] = {"model": MODEL_NAME, "max_tokens": tokens, "ignore_eos": True}
    if poem:
        path = "/v1/chat/completions"
        body |= {"messages": [{"role": "user", "content": POEM}], "temperature": 1.0}
    else:
        path = "/v1/completions"
        body |= {"prompt": JSON_CONTINUATION, "temperature": 0}
    response = await client.post(base + path, json=body, headers={"X-Speculative": route})
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


async def _batch(client: httpx.AsyncClient, base: str, batch: Batch, tokens: int) -> float:
    jobs = [_one(client, base, True, "off", tokens) for _ in range(batch.poems)]
    jobs += [_one(client, base, False, batch.json_route, tokens) for _ in range(batch.jsons)]
    started = time.monotonic()
    await asyncio.gather(*jobs)
    return time.monotonic() - started


async def _measure(base: str, repeats: int, tokens: int) -> dict[str, list[float]]:
    walls: dict[str, list[float]] = {}
    async with httpx.AsyncClient(timeout=600) as client:
        await _batch(client, base, BATCHES[2], tokens)  # warm-up: both engines, both prompts
        for batch in BATCHES:
            walls[batch.name] = [await _batch(client, base, batch, tokens) for _ in range(repeats)]
    return walls


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.mixed_batch", description=__doc__)
    parser.add_argument("--layouts", default="split,shared", help="--engine-cpus values")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/mixed_batch/<run id>/"
    )
    args = parser.parse_args(argv)
    results: dict[str, dict[str, list[float]]] = {}
    with recorded_run("bench.mixed_batch", args.out_dir, argv) as run:
        for layout in args.layouts.split(","):
            spec = specgate_spec(REPO, ["--engine-cpus", layout, "--routing-exploration", "0"])
            with serve(spec, free_port(), run.folder / "logs", 600) as server:
                walls = asyncio.run(_measure(server.base_url, args.repeats, args.max_tokens))
            results[layout] = walls
            for name, batch_walls in walls.items():
                print(
                    f"{layout:7s} {name:45s} {min(batch_walls):6.2f} {max(batch_walls):6.2f} s",
                    flush=True,
                )
        (run.folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
