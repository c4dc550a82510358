"""What Ray Serve costs: tokens per second through it against the same engine served directly.

python -m bench.ray_path [--repeats R] [--concurrency C] [--requests N]

Arms (bench/load_phases.py's table): `auto-one`, specgate's one engine in its own process,
and `auto-one-ray`, the same engine as a Ray Serve replica behind the gateway as Serve's
ingress (a local cluster, the replica reserving no logical CPU so its engine computes on every
core as the direct one does). Each arm is a fresh server; C clients in a closed loop send N
completions of the held-out prompts, each exactly 128 tokens (`ignore_eos`), after one warm-up
request. The arms run interleaved, R rounds; the ratio is taken within each round. Writes
results.json and summary.md under bench/results/ray_path/<run id>/ with its manifest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from openai import AsyncOpenAI

from bench.load_arms import ARM_TABLE, server_spec
from bench.manifest import recorded_run
from bench.repeats import interleaved
from bench.servers import MODEL_DIR, MODEL_NAME, ServerError, free_port, serve

logger = logging.getLogger("bench.ray_path")

ARMS = ("auto-one", "auto-one-ray")
PROMPTS = Path(__file__).resolve().parent / "prompts.jsonl"
OUTPUT_TOKENS = 128


@dataclass(frozen=True)
class Round:
    arm: str
    repeat: int
    tokens: int
    seconds: float
    e2e_mean_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def prompts() -> list[str]:
    texts = []
    for line in PROMPTS.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("split") != "report":
            continue
        if "messages" in entry:
            texts.append("\n".join(str(m["content"]) for m in entry["messages"]))
        else:
            texts.append(str(entry["prompt"]))
    return texts


async def load(base_url: str, model: str, texts: list[str], concurrency: int, count: int) -> Any:
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=600)
    await client.completions.create(model=model, prompt="Hi", max_tokens=4)
    queue = list(range(count))
    tokens, latencies = [], []

    async def worker() -> None:
        while queue:
            i = queue.pop()
            started = time.perf_counter()
            answer = await client.completions.create(
                model=model,
                prompt=texts[i % len(texts)],
                max_tokens=OUTPUT_TOKENS,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            latencies.append(time.perf_counter() - started)
            tokens.append(answer.usage.completion_tokens if answer.usage else 0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    await client.close()
    return sum(tokens), seconds, statistics.mean(latencies)


def summarize(rounds: list[Round]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        values = [r.tokens_per_s for r in rounds if r.arm == arm]
        if values:
            out[arm] = {
                "tokens_per_s": statistics.median(values),
                "spread": [min(values), max(values)],
            }
    by_round: dict[int, dict[str, Round]] = {}
    for r in rounds:
        by_round.setdefault(r.repeat, {})[r.arm] = r
    ratios = [
        pair["auto-one-ray"].tokens_per_s / pair["auto-one"].tokens_per_s
        for pair in by_round.values()
        if len(pair) == 2
    ]
    if ratios:
        out["ray_over_direct"] = {
            "median": statistics.median(ratios),
            "spread": [min(ratios), max(ratios)],
            "rounds": ratios,
        }
    return out


def markdown(summary: dict[str, Any], rounds: list[Round], argv: list[str]) -> str:
    lines = [
        "# Ray Serve's cost: tokens per second, through Ray and direct",
        "",
        f"`python -m bench.ray_path {' '.join(argv)}`; {OUTPUT_TOKENS} tokens a request "
        "(ignore_eos), greedy.",
        "",
        "| arm | round | tokens/s | e2e mean s |",
        "|---|--:|--:|--:|",
    ]
    for r in rounds:
        lines.append(f"| {r.arm} | {r.repeat} | {r.tokens_per_s:.1f} | {r.e2e_mean_s:.2f} |")
    ratio = summary.get("ray_over_direct")
    if ratio:
        low, high = ratio["spread"]
        lines += [
            "",
            f"Through Ray over direct, within each round: median **{ratio['median']:.3f}** "
            f"({low:.3f}-{high:.3f}; aim >= 0.8).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.ray_path", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    table = {a.name: a for a in ARM_TABLE}
    specs = SimpleNamespace(
        model_dir=MODEL_DIR, model_name=MODEL_NAME, vllm_args="", specgate_args=""
    )
    texts = prompts()
    with recorded_run("bench.ray_path", args.out_dir, argv) as run:
        rounds: list[Round] = []
        for repeat, name in interleaved(list(ARMS), args.repeats):
            spec = server_spec(table[name], specs)  # type: ignore[arg-type]
            spec = replace(spec, name=f"{spec.name}.r{repeat}")
            try:
                with serve(spec, free_port(), run.folder / "logs", 600.0) as server:
                    found = asyncio.run(
                        load(server.base_url, MODEL_NAME, texts, args.concurrency, args.requests)
                    )
            except ServerError as exc:
                logger.error("%s", exc)
                continue
            rounds.append(Round(name, repeat, *found))
            logger.info("%s round %d: %.1f tokens/s", name, repeat, rounds[-1].tokens_per_s)
        summary = summarize(rounds)
        (run.folder / "results.json").write_text(
            json.dumps(
                {"rounds": [vars(r) for r in rounds], "summary": summary}, indent=1, default=str
            )
        )
        text = markdown(summary, rounds, argv)
        (run.folder / "summary.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
