"""What a drafting step costs beyond its draft tokens, in one engine (issue 30's regression
check of the rejection sampler's noise, app/engine/vllm/worker/drafting_patches.py).

One fresh specgate server (`--engine-layout one`) writes every engine step's shape and time
(`SPECGATE_STEP_TRACE`). Each repeat sends two batches of `--sequences` requests at once,
exactly `--max-tokens` tokens each: all of them sampled poems that never draft, then the same
less one, beside a greedy JSON continuation that always drafts (`X-Speculative: on`). Reported,
over the decode steps of exactly `--sequences` sequences: the median time of steps without
drafts and of steps with drafts (and their draft tokens), and the difference. Before the fix
the difference was far above the draft tokens' own price: 106.9 against 67.5 ms at 20
sequences with 5 draft tokens (bench/RESULTS.md).

    python -m bench.drafting_step                 # about 3 minutes
    python -m bench.drafting_step --sequences 8 --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from app.embedded_model import MODEL_NAME
from bench.manifest import recorded_run
from bench.prompt_set import JSON_CONTINUATION, POEM
from bench.servers import REPO, free_port, serve, specgate_spec


async def _request(client: httpx.AsyncClient, drafting: bool, tokens: int) -> None:
    body: dict[str, Any] = {"model": MODEL_NAME, "max_tokens": tokens, "ignore_eos": True}
    if drafting:
        body |= {"prompt": JSON_CONTINUATION, "temperature": 0}
    else:
        body |= {"prompt": POEM, "temperature": 1.0}
    header = {"X-Speculative": "on" if drafting else "off"}
    response = await client.post("/v1/completions", json=body, headers=header)
    response.raise_for_status()


async def _batches(base_url: str, sequences: int, tokens: int, repeats: int) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await _request(client, True, 8)  # warm-up
        for _ in range(repeats):
            for drafting in (False, True):
                jobs = [_request(client, False, tokens) for _ in range(sequences - drafting)]
                jobs += [_request(client, True, tokens) for _ in range(int(drafting))]
                await asyncio.gather(*jobs)


def summarize(steps: list[dict[str, Any]], sequences: int) -> dict[str, Any]:
    """Median step times at exactly `sequences` decoding sequences, with and without drafts."""
    decode = [s for s in steps if s["sequences"] == sequences and s["new"] == 0]
    plain = [s["ms"] for s in decode if not s["drafting"] and s["tokens"] == sequences]
    drafting = [s for s in decode if s["drafting"]]
    out: dict[str, Any] = {"sequences": sequences, "plain_steps": len(plain)}
    out["drafting_steps"] = len(drafting)
    if plain:
        out["plain_ms"] = round(statistics.median(plain), 1)
    if drafting:
        out["drafting_ms"] = round(statistics.median(s["ms"] for s in drafting), 1)
        out["draft_tokens"] = statistics.median(s["draft_tokens"] for s in drafting)
    if plain and drafting:
        extra = out["drafting_ms"] - out["plain_ms"]
        out["extra_ms"] = round(extra, 1)
        out["extra_ms_per_draft_token"] = round(extra / max(out["draft_tokens"], 1), 2)
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.drafting_step", description=__doc__)
    parser.add_argument("--sequences", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--specgate-args", default="", help="extra flags for the server")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/drafting_step/<id>/"
    )
    args = parser.parse_args(argv)
    with recorded_run("bench.drafting_step", args.out_dir, argv) as run:
        trace = run.folder / "steps.jsonl"
        extra = ["--engine-layout", "one", "--routing-exploration", "0"]
        spec = specgate_spec(REPO, [*extra, *shlex.split(args.specgate_args)], "specgate-one")
        spec = replace(spec, env={**spec.env, "SPECGATE_STEP_TRACE": str(trace)})
        with serve(spec, free_port(), run.folder / "logs", 600) as server:
            asyncio.run(_batches(server.base_url, args.sequences, args.max_tokens, args.repeats))
        steps = [json.loads(line) for line in trace.read_text().splitlines() if line]
        result = summarize(steps, args.sequences)
        (run.folder / "results.json").write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
