"""Agent-shaped traffic (bench/agent_sessions.py) against each arm, each a fresh server:
time per output token, overall and by kind, and each conversation's time.

    python -m bench.agent_traffic                      # every arm once, the report split
    python -m bench.agent_traffic --repeats 3          # interleaved rounds, medians and spreads
    python -m bench.agent_traffic --arms ray2-specgate,ray2-power-of-two,ray2-prefix-affinity \
        --baselines ray2-power-of-two,ray2-prefix-affinity --repeats 3   # Ray Serve's routers

The three agents and the stream of creative prompts run side by side (four conversations in
flight), each turn sent when the one before it has answered, greedy, ending where the model
ends (up to each session's max_tokens). Every arm serves the same model with the same engine
flags; greedy answers are the same on every arm, so each writes the same tokens (the results
say how many, per arm, to check).
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
from bench.agent_sessions import KINDS, Session, sessions
from bench.load_arms import ARM_TABLE, LoadArm, add_server_options, server_spec
from bench.manifest import recorded_run
from bench.servers import (
    ServerError,
    free_port,
    serve,
    stop_on_sigterm,
    traced,
)

logger = logging.getLogger("bench.agent_traffic")

DEFAULT_ARMS = "vllm-plain-all,vllm-k5-all,vllm-suffix-all,never-one,auto-one,auto-one-suffix"
# What each specgate arm is compared with: vLLM's arms, and never drafting.
BASELINES = ("vllm-plain-all", "vllm-k5-all", "vllm-suffix-all", "never-one")


@dataclass(frozen=True)
class Turn:
    arm: str
    repeat: int
    session: str
    kind: str
    turn: int
    seconds: float
    tokens: int


async def converse(client: AsyncOpenAI, arm: LoadArm, session: Session, model: str) -> list[Turn]:
    messages: list[dict[str, str]] = [{"role": "system", "content": session.system}]
    turns = []
    for i, text in enumerate(session.turns):
        messages.append({"role": "user", "content": text})
        started = time.perf_counter()
        completion = await client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=session.max_tokens,
            temperature=0,
            extra_headers={"X-Speculative": arm.header} if arm.header else None,
        )
        seconds = time.perf_counter() - started
        answer = completion.choices[0].message.content or ""
        tokens = completion.usage.completion_tokens if completion.usage else 0
        turns.append(Turn(arm.name, 0, session.name, session.kind, i, seconds, tokens))
        messages.append({"role": "assistant", "content": answer})
    return turns


async def run_arm(base_url: str, arm: LoadArm, plan: Sequence[Session], model: str) -> list[Turn]:
    client = AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0, timeout=600)
    # One short request first: the server's first answer pays for lazy set-up.
    await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
    )
    agents = [s for s in plan if s.kind != "creative"]
    creative = [s for s in plan if s.kind == "creative"]

    async def one_after_another() -> list[Turn]:
        done: list[Turn] = []
        for session in creative:
            done += await converse(client, arm, session, model)
        return done

    found = await asyncio.gather(
        *(converse(client, arm, s, model) for s in agents), one_after_another()
    )
    await client.close()
    return [turn for turns in found for turn in turns]


def per_token_ms(turns: Sequence[Turn], kind: str | None = None) -> float | None:
    chosen = [t for t in turns if kind is None or t.kind == kind]
    tokens = sum(t.tokens for t in chosen)
    return 1000 * sum(t.seconds for t in chosen) / tokens if tokens else None


def conversation_s(turns: Sequence[Turn], kind: str) -> float | None:
    by_session: dict[str, float] = {}
    for t in turns:
        if t.kind == kind:
            by_session[t.session] = by_session.get(t.session, 0.0) + t.seconds
    return statistics.mean(by_session.values()) if by_session else None


def figures(turns: Sequence[Turn]) -> dict[str, float | None]:
    """One arm's run: ms per output token overall and by kind, seconds per conversation by
    kind, and the tokens written."""
    out: dict[str, float | None] = {"ms_per_token": per_token_ms(turns)}
    for kind in KINDS:
        out[f"ms_per_token {kind}"] = per_token_ms(turns, kind)
        out[f"conversation_s {kind}"] = conversation_s(turns, kind)
    out["tokens"] = float(sum(t.tokens for t in turns))
    return out


def summarize(turns: Sequence[Turn], arms: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per arm and figure: the median over repeats, with its spread."""
    table: dict[str, dict[str, Any]] = {}
    for arm in arms:
        runs: dict[int, dict[str, float | None]] = {}
        for r in sorted({t.repeat for t in turns if t.arm == arm}):
            runs[r] = figures([t for t in turns if t.arm == arm and t.repeat == r])
        names = next(iter(runs.values())).keys() if runs else ()
        table[arm] = {}
        for name in names:
            values = {r: v[name] for r, v in runs.items() if v[name] is not None}
            found = repeats.spread(values)  # type: ignore[arg-type]
            table[arm][name] = found.to_json() if found else None
    return table


def paired_ratios(
    turns: Sequence[Turn], arm: str, baseline: str, figure: str
) -> dict[str, Any] | None:
    """arm / baseline for one figure, within each round, then the median over rounds."""
    values: dict[int, float] = {}
    for r in sorted({t.repeat for t in turns}):
        mine = figures([t for t in turns if t.arm == arm and t.repeat == r]).get(figure)
        theirs = figures([t for t in turns if t.arm == baseline and t.repeat == r]).get(figure)
        if mine and theirs:
            values[r] = mine / theirs
    found = repeats.spread(values)
    return found.to_json() if found else None


def markdown(table: dict[str, dict[str, Any]], ratios: dict[str, Any], order: str) -> str:
    def cell(entry: dict[str, Any] | None, digits: int = 1) -> str:
        if not entry:
            return "-"
        return f"{entry['median']:.{digits}f} ({entry['min']:.{digits}f}-{entry['max']:.{digits}f})"

    lines = [
        "# Agent-shaped traffic",
        "",
        f"Run order: {order}",
        "",
        "Milliseconds per output token, median of the repeats (min-max):",
        "",
        "| arm | all | " + " | ".join(KINDS) + " | tokens |",
        "|---|" + "--:|" * (len(KINDS) + 2),
    ]
    for arm, found in table.items():
        kinds = " | ".join(cell(found.get(f"ms_per_token {k}")) for k in KINDS)
        tokens = cell(found.get("tokens"), 0)
        lines.append(f"| {arm} | {cell(found.get('ms_per_token'))} | {kinds} | {tokens} |")
    lines += ["", "Seconds per conversation, by kind:", ""]
    lines += ["| arm | " + " | ".join(KINDS) + " |", "|---|" + "--:|" * len(KINDS)]
    for arm, found in table.items():
        kinds = " | ".join(cell(found.get(f"conversation_s {k}"), 2) for k in KINDS)
        lines.append(f"| {arm} | {kinds} |")
    lines += ["", "Ratios within each round, median (min-max):", ""]
    lines += ["| arm / baseline | figure | ratio |", "|---|---|--:|"]
    for key, entry in ratios.items():
        pair, figure = key.split(" : ")
        lines.append(f"| {pair} | {figure} | {cell(entry, 3)} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_traffic", description=__doc__)
    parser.add_argument("--arms", default=DEFAULT_ARMS, help="comma-separated, from load_phases")
    parser.add_argument("--split", choices=("tune", "report"), default="report")
    parser.add_argument("--repeats", type=int, default=1, metavar="R")
    parser.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help="comma-separated: the arms every other arm is compared with",
    )
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
    if not names or any(n not in table for n in names):
        raise SystemExit(f"--arms: from {', '.join(table)}")
    plan = sessions(args.split)
    order = repeats.interleaved([table[n] for n in names], args.repeats)
    specs = SimpleNamespace(**vars(args))  # what load_phases' server_spec reads
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with recorded_run("bench.agent_traffic", args.out_dir, argv) as run:
        turns: list[Turn] = []
        for repeat, arm in order:
            spec = server_spec(arm, specs)  # type: ignore[arg-type]
            spec = replace(spec, name=f"{spec.name}.r{repeat}")
            if arm.server == "specgate":
                spec = traced(spec, run.folder / "logs")
            try:
                with serve(spec, free_port(), run.folder / "logs", args.startup_timeout) as srv:
                    found = asyncio.run(run_arm(srv.base_url, arm, plan, args.model_name))
            except ServerError as exc:
                logger.error("%s", exc)
                continue
            turns += [Turn(**{**asdict(t), "repeat": repeat}) for t in found]
            logger.info("%s round %d: %s", arm.name, repeat, figures(found))
        summary = summarize(turns, names)
        baselines = {n.strip() for n in args.baselines.split(",")}
        ratios = {
            f"{arm} / {base} : {figure}": paired_ratios(turns, arm, base, figure)
            for arm in names
            if arm not in baselines
            for base in names
            if base in baselines
            for figure in ("ms_per_token", "ms_per_token creative")
        }
        order_text = ", ".join(f"{a.name} (round {r})" for r, a in order)
        (run.folder / "results.json").write_text(
            json.dumps(
                {"turns": [asdict(t) for t in turns], "summary": summary, "ratios": ratios},
                indent=1,
            )
        )
        (run.folder / "summary.md").write_text(markdown(summary, ratios, order_text))
        print(markdown(summary, ratios, order_text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
