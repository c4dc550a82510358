"""Edit-shaped traffic (bench/edit_files.py) with and without Predicted Outputs, side by side
with vLLM's server (issue 42): time per output token and per request, by kind and by requests
in flight, each arm a fresh server.

    python -m bench.edit_traffic --repeats 3                    # the report split, every arm
    python -m bench.edit_traffic --split tune --levels 1,8      # tuning

An arm is a server arm of bench/load_arms.py, or one with `+prediction`: the same server, the
client sending each request's prediction; or with `+oracle`: the client sending the answer
itself (the greedy answer a server of its own gave), the bound no prediction can beat.
Each kind at each level sends the split's requests of that kind (at least as many as the
level) with at most that many in flight, greedy, ending where the model ends (up to the
request's bound). Greedy answers are the same on every arm (each arm's results say how many
tokens it wrote, to check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from openai import AsyncOpenAI

from bench import repeats
from bench.edit_files import KINDS, EditRequest, requests
from bench.load_arms import ARM_TABLE, LoadArm, add_server_options, server_spec
from bench.manifest import recorded_run
from bench.servers import (
    ServerError,
    free_port,
    serve,
    stop_on_sigterm,
    traced,
)

logger = logging.getLogger("bench.edit_traffic")

PREDICTED = "+prediction"
ORACLE = "+oracle"
DEFAULT_ARMS = f"vllm-plain-all,vllm-k5-all,vllm-suffix-all,auto-one,auto-one{PREDICTED}"
VLLM_ARMS = ("vllm-plain-all", "vllm-k5-all", "vllm-suffix-all")


@dataclass(frozen=True)
class Answer:
    arm: str
    repeat: int
    kind: str
    level: int
    seed: int
    seconds: float
    tokens: int
    accepted_prediction: int | None

    @property
    def ms_per_token(self) -> float:
        return self.seconds * 1000 / max(self.tokens, 1)


def base_arm(name: str) -> str:
    return name.removesuffix(PREDICTED).removesuffix(ORACLE)


def sent_prediction(name: str, request: EditRequest) -> str | None:
    """What the arm's client sends as the request's prediction, if anything."""
    if name.endswith(PREDICTED):
        return request.prediction
    if name.endswith(ORACLE):
        return request.answer
    return None


async def ask(
    client: AsyncOpenAI, request: EditRequest, prediction: str | None, model: str
) -> tuple[float, int, int | None]:
    extra: dict[str, Any] = {}
    if prediction is not None:
        extra["prediction"] = {"type": "content", "content": prediction}
    started = time.perf_counter()
    completion = await client.chat.completions.create(
        model=model,
        messages=list(request.messages),  # type: ignore[arg-type]  # plain dicts of the SDK's shape
        max_tokens=request.max_tokens,
        temperature=0,
        extra_body=extra or None,
    )
    seconds = time.perf_counter() - started
    usage = completion.usage
    details = usage.completion_tokens_details if usage else None
    landed = details.accepted_prediction_tokens if details and prediction is not None else None
    return seconds, usage.completion_tokens if usage else 0, landed


async def run_arm(
    base_url: str, name: str, plan: Sequence[EditRequest], levels: Sequence[int], model: str
) -> list[Answer]:
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=900)
    await client.chat.completions.create(  # the server's first answer pays for lazy set-up
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
    )
    answers: list[Answer] = []
    for kind in KINDS:
        mine = [r for r in plan if r.kind == kind]
        for level in levels:
            batch = (mine * level)[: max(level, 2)]
            answers += await at_most(client, name, batch, level, model)
    await client.close()
    return answers


async def at_most(
    client: AsyncOpenAI,
    name: str,
    batch: Sequence[EditRequest],
    level: int,
    model: str,
) -> list[Answer]:
    """The batch's answers, with at most `level` requests in flight."""
    gate = asyncio.Semaphore(level)

    async def one(request: EditRequest) -> Answer:
        async with gate:
            prediction = sent_prediction(name, request)
            seconds, tokens, landed = await ask(client, request, prediction, model)
        return Answer(name, 0, request.kind, level, request.seed, seconds, tokens, landed)

    return list(await asyncio.gather(*(one(r) for r in batch)))


async def kept_answers(
    base_url: str, plan: Sequence[EditRequest], model: str, oracle: bool
) -> list[EditRequest]:
    """The plan with each `cache` request's prediction set to what the model answered, greedy,
    for the records before the change: what a client kept from last time; and, for an oracle
    arm, each request's own greedy answer."""
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=900)

    async def greedy(messages: list[Any], max_tokens: int) -> str:
        completion = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0
        )
        return completion.choices[0].message.content or ""

    kept = []
    for request in plan:
        if request.previous_prompt is not None:
            asked = [{"role": "user", "content": request.previous_prompt}]
            request = replace(request, prediction=await greedy(asked, request.max_tokens))
        if oracle:
            request = replace(
                request, answer=await greedy(list(request.messages), request.max_tokens)
            )
        kept.append(request)
    await client.close()
    return kept


def figures(answers: Sequence[Answer]) -> dict[str, float]:
    # Per output token over the cell (a 13-token answer weighs as its tokens, not as one
    # of two answers); per request, the mean.
    tokens = sum(a.tokens for a in answers)
    return {
        "ms_per_token": sum(a.seconds for a in answers) * 1000 / max(tokens, 1),
        "request_s": statistics.fmean(a.seconds for a in answers),
        "tokens": float(sum(a.tokens for a in answers)),
    }


def cells(answers: Sequence[Answer]) -> list[tuple[str, int]]:
    order: dict[str, int] = {kind: i for i, kind in enumerate(KINDS)}
    return sorted({(a.kind, a.level) for a in answers}, key=lambda c: (order[c[0]], c[1]))


def of(answers: Sequence[Answer], arm: str, kind: str, level: int, repeat: int) -> list[Answer]:
    return [a for a in answers if (a.arm, a.kind, a.level, a.repeat) == (arm, kind, level, repeat)]


def summarize(answers: Sequence[Answer], arms: Sequence[str]) -> dict[str, Any]:
    """Per arm, kind and level: each figure's median over repeats, with its spread."""
    table: dict[str, Any] = {}
    for arm in arms:
        for kind, level in cells(answers):
            chosen = [a for a in answers if (a.arm, a.kind, a.level) == (arm, kind, level)]
            runs = {
                r: figures([a for a in chosen if a.repeat == r]) for r in {a.repeat for a in chosen}
            }
            key = f"{arm} | {kind} | {level}"
            table[key] = {}
            for figure in ("ms_per_token", "request_s", "tokens"):
                found = repeats.spread({r: v[figure] for r, v in runs.items()})
                table[key][figure] = found.to_json() if found else None
    return table


def paired(answers: Sequence[Answer], arm: str, base: str, kind: str, level: int) -> Any:
    """arm / base in ms per output token, within each round, then the median over rounds."""
    values: dict[int, float] = {}
    for r in sorted({a.repeat for a in answers}):
        mine, theirs = of(answers, arm, kind, level, r), of(answers, base, kind, level, r)
        if mine and theirs:
            values[r] = figures(mine)["ms_per_token"] / figures(theirs)["ms_per_token"]
    found = repeats.spread(values)
    return found.to_json() if found else None


def median_ms(answers: Sequence[Answer], arm: str, kind: str, level: int) -> float:
    """The arm's median over rounds of its ms per output token in this cell."""
    rounds = {a.repeat for a in answers if a.arm == arm}
    found = [
        figures(chosen)["ms_per_token"]
        for r in rounds
        if (chosen := of(answers, arm, kind, level, r))
    ]
    return statistics.median(found) if found else float("inf")


def ratios(answers: Sequence[Answer], arms: Sequence[str]) -> dict[str, Any]:
    """Each arm against vLLM's fastest arm of the cell (its median), and against specgate
    without the prediction."""
    found: dict[str, Any] = {}
    for kind, level in cells(answers):
        vllm = [a for a in arms if a in VLLM_ARMS]
        fastest = min(vllm, key=lambda n: median_ms(answers, n, kind, level), default=None)
        for arm in arms:
            if base_arm(arm) == arm:
                continue
            if fastest is not None:
                found[f"{arm} / {fastest} | {kind} | {level}"] = paired(
                    answers, arm, fastest, kind, level
                )
            without = base_arm(arm)
            if without in arms:
                found[f"{arm} / {without} | {kind} | {level}"] = paired(
                    answers, arm, without, kind, level
                )
    return found


def markdown(table: dict[str, Any], found: dict[str, Any], order: str) -> str:
    def cell(entry: dict[str, Any] | None, digits: int = 1) -> str:
        if not entry:
            return "-"
        return f"{entry['median']:.{digits}f} ({entry['min']:.{digits}f}-{entry['max']:.{digits}f})"

    lines = [
        "| arm | kind | in flight | ms per output token | s per request | tokens |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for key, figs in table.items():
        arm, kind, level = key.split(" | ")
        lines.append(
            f"| {arm} | {kind} | {level} | {cell(figs['ms_per_token'])} | "
            f"{cell(figs['request_s'], 2)} | {cell(figs['tokens'], 0)} |"
        )
    lines += [
        "",
        "| ratio (ms per output token, paired by round) | median (min-max) |",
        "|---|--:|",
    ]
    lines += [f"| {key} | {cell(value, 3)} |" for key, value in found.items()]
    return "\n".join([*lines, "", f"Run order: {order}", ""])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.edit_traffic", description=__doc__)
    parser.add_argument("--arms", default=DEFAULT_ARMS, help="comma-separated")
    parser.add_argument("--split", choices=("tune", "report"), default="report")
    parser.add_argument("--levels", default="1,2,4,8", help="requests in flight, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, metavar="R")
    parser.add_argument("--out-dir", type=Path, default=None)
    add_server_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    table = {a.name: a for a in ARM_TABLE}
    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    if not names or any(base_arm(n) not in table for n in names):
        raise SystemExit(
            f"--arms: from {', '.join(table)}, each optionally with {PREDICTED} or {ORACLE}"
        )
    levels = [int(level) for level in args.levels.split(",")]
    plan = requests(args.split)
    order = repeats.interleaved(names, args.repeats)
    specs = SimpleNamespace(**vars(args))  # what load_arms' server_spec reads
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with recorded_run("bench.edit_traffic", args.out_dir, argv) as run:
        # The client's cache, from a server of its own (no arm's trees hold those answers).
        keeper = replace(server_spec(table["never-one"], specs), name="cache-keeper")  # type: ignore[arg-type]
        with serve(keeper, free_port(), run.folder / "logs", args.startup_timeout) as srv:
            oracle = any(n.endswith(ORACLE) for n in names)
            plan = asyncio.run(kept_answers(srv.base_url, plan, args.model_name, oracle))
        (run.folder / "requests.json").write_text(json.dumps([asdict(r) for r in plan], indent=1))
        answers: list[Answer] = []
        for repeat, name in order:
            arm: LoadArm = table[base_arm(name)]
            spec = server_spec(arm, specs)  # type: ignore[arg-type]
            spec = replace(spec, name=f"{name}.r{repeat}")
            if arm.server == "specgate":
                spec = traced(spec, run.folder / "logs")
            try:
                with serve(spec, free_port(), run.folder / "logs", args.startup_timeout) as srv:
                    found = asyncio.run(run_arm(srv.base_url, name, plan, levels, args.model_name))
            except ServerError as exc:
                logger.error("%s", exc)
                continue
            answers += [replace(a, repeat=repeat) for a in found]
            logger.info("%s round %d: %s", name, repeat, figures(found))
        summary = summarize(answers, names)
        found_ratios = ratios(answers, names)
        order_text = ", ".join(f"{n} (round {r})" for r, n in order)
        (run.folder / "results.json").write_text(
            json.dumps(
                {
                    "answers": [asdict(a) for a in answers],
                    "summary": summary,
                    "ratios": found_ratios,
                },
                indent=1,
            )
        )
        report = markdown(summary, found_ratios, order_text)
        (run.folder / "summary.md").write_text(report)
        print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
