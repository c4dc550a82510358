"""Two engines or one (--engine-layout): start-up, memory, KV capacity, speed and exactness.

A fresh specgate server per layout, started one after the other and then measured side by
side (each case on both in turn: this machine drifts by 10 % and more between runs, so
ratios are taken within one run); a vLLM OpenAI server with the same model and ngram
settings is started alone first, for the start-up reference. Per layout:

- start-up: process start to a healthy /health;
- memory: resident set of the whole process tree, after the measurements;
- KV capacity: the tokens each engine core logged ("KV cache size: N tokens");
- speed: decode milliseconds per token (after the first token), `--max-tokens` tokens with
  `ignore_eos`, medians over `--repeats` after a warm-up: a poem at T=1 and a JSON
  continuation at T=0, with X-Speculative off (in `one`: draft length 0), on, and on;k=2;
  then 4 poems at once, off;
- exactness: greedy answers (T=0, 64 tokens) to two prompts under off, on and on;k=2;
- a forced move (X-Specgate-Move-After: 32) from plain to speculative: the longest gap
  between chunks, which holds the move, against the median gap.

    python -m bench.layouts      # about 8 minutes; bench/results/layouts/<run id>/ (or --out-dir)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.embedded_model import MODEL_NAME
from bench.manifest import recorded_run
from bench.mixed_batch import JSON_CONTINUATION, POEM
from bench.run import MODEL_DIR
from bench.servers import ServerProcess, free_port, serve, specgate_spec, vllm_spec

REPO = Path(__file__).resolve().parents[1]
KV_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")
ROUTES = ("off", "on", "on;k=2")
GREEDY_PROMPTS = {
    "json": JSON_CONTINUATION,
    "prose": "The history of the printing press begins",
}


async def _decode_ms_per_token(
    client: httpx.AsyncClient, base: str, poem: bool, header: str, tokens: int
) -> float:
    """One streamed request's decode time per token, after its first token."""
    body: dict[str, Any] = {
        "model": MODEL_NAME,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "prompt": POEM if poem else JSON_CONTINUATION,
        "temperature": 1.0 if poem else 0.0,
    }
    first: float | None = None
    count = 0
    async with client.stream(
        "POST", f"{base}/v1/completions", json=body, headers={"X-Speculative": header}
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            # Count every chunk that carries a choice: with ignore_eos a sampled answer can
            # run on through special tokens, whose text is empty.
            if json.loads(line[6:])["choices"]:
                count += 1
                first = first or time.monotonic()
    if first is None or count < 2:
        raise RuntimeError(f"too few chunks streamed ({count})")
    # Chunks carry one or more tokens; the requested count is exact with ignore_eos.
    return (time.monotonic() - first) * 1000 / (tokens - 1)


async def _speeds(bases: dict[str, str], repeats: int, tokens: int) -> dict[str, dict[str, float]]:
    """Each case on every server in turn, the order alternating per repeat, so that the
    machine's drift (easily 10 % between runs here) falls on both layouts alike."""
    cases = [(poem, header) for poem in (True, False) for header in ROUTES]
    samples: dict[str, dict[str, list[float]]] = {layout: {} for layout in bases}
    async with httpx.AsyncClient(timeout=600) as client:
        for base in bases.values():
            for poem, header in cases:  # warm-up: every case once
                await _decode_ms_per_token(client, base, poem, header, tokens)
        for repeat in range(repeats):
            order = list(bases) if repeat % 2 == 0 else list(reversed(bases))
            for poem, header in cases:
                name = f"{'poem' if poem else 'json'} {header}"
                for layout in order:
                    ms = await _decode_ms_per_token(client, bases[layout], poem, header, tokens)
                    samples[layout].setdefault(name, []).append(ms)
            for layout in order:
                batch = [
                    _decode_ms_per_token(client, bases[layout], True, "off", tokens)
                    for _ in range(4)
                ]
                samples[layout].setdefault("4 poems off", []).append(
                    statistics.mean(await asyncio.gather(*batch))
                )
    return {
        layout: {name: statistics.median(values) for name, values in cases_.items()}
        for layout, cases_ in samples.items()
    }


async def _move_gap_ms(base: str, repeats: int) -> dict[str, float]:
    """A forced move after 32 tokens: the longest gap between chunks, against the median one.

    The move ends the request on one route and resubmits prompt plus output on the other:
    on two engines the other engine must read it all again (its prefix cache may hold the
    prompt); on one engine the same KV blocks are already cached.
    """
    body = {
        "model": MODEL_NAME,
        "prompt": JSON_CONTINUATION,
        "max_tokens": 96,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"X-Speculative": "off", "X-Specgate-Move-After": "32"}
    gaps: list[float] = []
    medians: list[float] = []
    async with httpx.AsyncClient(timeout=600) as client:
        for _ in range(repeats + 1):  # the first is a warm-up
            arrivals: list[float] = []
            moved = False
            async with client.stream(
                "POST", f"{base}/v1/completions", json=body, headers=headers
            ) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.monotonic())
                        info = json.loads(line[6:]).get("specgate") or {}
                        moved = moved or len(info.get("segments") or []) > 1
            if not moved:
                raise RuntimeError("the forced move did not happen")
            between = [b - a for a, b in itertools.pairwise(arrivals[1:])]
            gaps.append(max(between) * 1000)
            medians.append(statistics.median(between) * 1000)
    return {
        "move_gap_ms": statistics.median(gaps[1:]),
        "median_gap_ms": statistics.median(medians[1:]),
    }


async def _greedy(base: str) -> dict[str, str]:
    texts: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=600) as client:
        for name, prompt in GREEDY_PROMPTS.items():
            for header in ROUTES:
                body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 64, "temperature": 0}
                response = await client.post(
                    f"{base}/v1/completions", json=body, headers={"X-Speculative": header}
                )
                response.raise_for_status()
                texts[f"{name} {header}"] = response.json()["choices"][0]["text"]
    return texts


def _tree_rss_mib(server: ServerProcess) -> float:
    processes = [psutil.Process(server.process.pid), *server.tracked.values()]
    total = 0
    for process in {p.pid: p for p in processes}.values():
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def _kv_tokens(server: ServerProcess) -> list[int]:
    text = server.log_path.read_text(errors="replace")
    return [int(match.replace(",", "")) for match in KV_LINE.findall(text)]


def measure_layouts(layouts: list[str], repeats: int, tokens: int, log_dir: Path) -> dict[str, Any]:
    """Start a server per layout (one after another, so start-up is timed alone), then
    measure them side by side."""
    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for layout in layouts:
            args = ["--engine-layout", layout, "--routing-exploration", "0"]
            spec = specgate_spec(REPO, args, f"specgate-{layout}")
            servers[layout] = stack.enter_context(serve(spec, free_port(), log_dir, 600))
        bases = {layout: server.base_url for layout, server in servers.items()}
        speeds = asyncio.run(_speeds(bases, repeats, tokens))
        results: dict[str, Any] = {}
        for layout, server in servers.items():
            results[layout] = {
                "startup_s": server.startup_s,
                "tree_rss_mib": _tree_rss_mib(server),
                "kv_cache_tokens": _kv_tokens(server),
                "decode_ms_per_token": speeds[layout],
                "greedy": asyncio.run(_greedy(server.base_url)),
                "forced_move": asyncio.run(_move_gap_ms(server.base_url, repeats)),
            }
        return results


def vllm_startup_s(log_dir: Path) -> float:
    spec = vllm_spec(MODEL_DIR, MODEL_NAME, True, [], REPO)
    with serve(spec, free_port(), log_dir, 600) as server:
        return server.startup_s


def report(results: dict[str, Any]) -> str:
    layouts = [name for name in ("two", "one") if name in results]
    lines = [f"| | {' | '.join(layouts)} |", "|---|" + "--:|" * len(layouts)]
    reference = results.get("vllm_startup_s")
    for name in layouts:
        results[name]["startup_vs_vllm"] = (
            results[name]["startup_s"] / reference if reference else None
        )
    rows = [
        ("start-up s", lambda r: f"{r['startup_s']:.1f}"),
        (
            "start-up / vLLM server",
            lambda r: f"{r['startup_vs_vllm']:.2f}" if r["startup_vs_vllm"] else "-",
        ),
        ("process tree RSS MiB", lambda r: f"{r['tree_rss_mib']:.0f}"),
        ("KV cache tokens", lambda r: " + ".join(f"{t:,}" for t in r["kv_cache_tokens"])),
    ]
    rows.append(
        ("forced move: longest chunk gap ms", lambda r: f"{r['forced_move']['move_gap_ms']:.0f}")
    )
    rows.append(
        ("forced move: median chunk gap ms", lambda r: f"{r['forced_move']['median_gap_ms']:.0f}")
    )
    for case in results[layouts[0]]["decode_ms_per_token"]:
        rows.append((f"{case}, ms/token", lambda r, c=case: f"{r['decode_ms_per_token'][c]:.1f}"))
    for label, cell in rows:
        lines.append(f"| {label} | {' | '.join(cell(results[n]) for n in layouts)} |")
    if len(layouts) == 2:
        lines.append("\n| case | one / two, ms/token |\n|---|--:|")
        two, one = (results[n]["decode_ms_per_token"] for n in ("two", "one"))
        lines += [f"| {case} | {one[case] / two[case]:.3f} |" for case in two]
    texts = {f"{n}: {key}": text for n in layouts for key, text in results[n]["greedy"].items()}
    by_prompt: dict[str, set[str]] = {}
    for key, text in texts.items():
        by_prompt.setdefault(key.split(": ")[1].split(" ")[0], set()).add(text)
    for prompt, variants in by_prompt.items():
        lines.append(
            f"\ngreedy {prompt}: {len(variants)} distinct answer(s) over layouts x {ROUTES}"
        )
    if reference:
        lines.insert(0, f"vLLM OpenAI server (ngram, same flags) start-up: {reference:.1f} s\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.layouts", description=__doc__)
    parser.add_argument("--layouts", default="two,one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--skip-vllm", action="store_true", help="no vLLM start-up reference")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/layouts/<run id>/"
    )
    args = parser.parse_args(argv)
    with recorded_run("bench.layouts", args.out_dir, argv) as run:
        log_dir = run.folder / "logs"
        results: dict[str, Any] = {}
        if not args.skip_vllm:
            results["vllm_startup_s"] = vllm_startup_s(log_dir)
        layouts = args.layouts.split(",")
        results.update(measure_layouts(layouts, args.repeats, args.max_tokens, log_dir))
        print(report(results), flush=True)
        (run.folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
