"""Replay a seeded, open-loop arrival schedule (quiet, burst, quiet, then a steady closed loop)
against specgate, one fresh server per arm, and compare never / always / auto routing.

    python -m bench.load_phases                         # the default schedule (long)
    python -m bench.load_phases --smoke --out-dir /tmp/lp-smoke   # a quick end-to-end check
    python -m bench.load_phases --dry-run               # print the schedule, start nothing
    python -m bench.load_phases --arms changing-load --steady 0,0 --repeats 3   # issue 30

Open loop: each request of the quiet and burst phases is sent at its scheduled time whether or
not earlier ones have finished, so a slow arm builds up a queue as a real service would. The
steady phase is a closed loop: a fixed number of requests in flight. Every arm replays the
identical schedule of (time, prompt). With --repeats R every arm runs R times, in interleaved
rounds, and bench/repeats.py reports medians and spreads over them. See bench/README.md.

This module runs the servers and writes the results; its parts: bench/load_arms.py (the arms,
by family, and each one's server), bench/load_schedule.py (the phases and their timeline),
bench/load_replay.py (one arm's replay on one server), bench/load_summary.py (the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import repeats, report
from bench.client import Prompt
from bench.load_arms import (
    ARM_SETS,
    ARM_TABLE,
    DEFAULT_ARMS,
    FIXED_ARMS,
    LoadArm,
    server_spec,
)
from bench.load_paired import paired_names, run_paired
from bench.load_replay import Record, run_arm
from bench.load_schedule import Phase, Slot, build_schedule, phase_plan, schedule_markdown
from bench.load_summary import ORACLE, markdown, oracle_records, ratios, summaries
from bench.manifest import recorded_run
from bench.prompt_set import load_prompts
from bench.report import ms_cell, s_cell
from bench.servers import (
    MODEL_DIR,
    MODEL_NAME,
    REPO,
    ServerError,
    free_port,
    serve,
    stop_on_sigterm,
    traced,
)

logger = logging.getLogger("bench.load_phases")

# -- the servers, one per arm --------------------------------------------------------------------


def server_groups(args: argparse.Namespace) -> list[tuple[LoadArm, ...]]:
    """One fresh server per arm, or with --shared-server one per distinct set of server args."""
    if not args.shared_server:
        return [(arm,) for arm in args.arms]
    groups: dict[Any, list[LoadArm]] = {}
    for arm in args.arms:
        server = (
            arm.server,
            arm.server_args,
            repr(arm.speculative_config),
            arm.whole_machine,
            arm.env,
        )
        groups.setdefault(server, []).append(arm)
    return [tuple(g) for g in groups.values()]


def server_names(
    args: argparse.Namespace, group: tuple[LoadArm, ...], repeat: int
) -> tuple[str, str]:
    """The group's server's name, and its log's (each repeat's server keeps its own log)."""
    first = server_spec(group[0], args).name
    name = first if len(group) == 1 else first + "+" + "+".join(a.name for a in group[1:])
    return name, name if args.repeats == 1 else f"{name}.r{repeat}"


def run_order(args: argparse.Namespace) -> list[tuple[int, tuple[LoadArm, ...]]]:
    """(repeat, server group) in the order they run: --repeats interleaved rounds."""
    return repeats.interleaved(server_groups(args), args.repeats)


def order_names(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The run order by arm names, a shared server's arms joined by '+'."""
    if args.paired:
        return paired_names(args)
    return [(r, "+".join(a.name for a in group)) for r, group in run_order(args)]


def run_all(
    args: argparse.Namespace,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
) -> tuple[list[Record], list[dict[str, Any]]]:
    records: list[Record] = []
    servers: list[dict[str, Any]] = []
    for repeat, group in run_order(args):
        got, info = run_group(args, group, repeat, schedule, phases, prompts)
        records += got
        servers.append(info)
    return records, servers


def run_group(
    args: argparse.Namespace,
    group: tuple[LoadArm, ...],
    repeat: int,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
) -> tuple[list[Record], dict[str, Any]]:
    """One fresh server for this group's arms, each arm's schedule run once on it."""
    records: list[Record] = []
    name, log_name = server_names(args, group, repeat)
    spec = replace(server_spec(group[0], args, args.out_dir / "logs" / log_name), name=log_name)
    if group[0].server == "specgate":  # to tell a losing round from a winning one (issue 40)
        spec = traced(spec, args.out_dir / "logs")
    info: dict[str, Any] = {
        "name": name,
        "repeat": repeat,
        "argv": spec.argv,
        "arms": [a.name for a in group],
    }
    info["load_avg_before"] = [round(x, 2) for x in os.getloadavg()]
    port = args.port or free_port()
    try:
        with serve(spec, port, args.out_dir / "logs", args.startup_timeout) as server:
            info["startup_s"] = round(server.startup_s, 1)
            info["port"] = port
            for arm in group:
                started = time.perf_counter()
                got = asyncio.run(
                    run_arm(server.base_url, arm, schedule, phases, prompts, args, repeat)
                )
                info.setdefault("arm_wall_s", {})[arm.name] = round(
                    time.perf_counter() - started, 1
                )
                records += got
    except ServerError as exc:
        # One server failing (an unknown flag, say) should not cost the other arms.
        logger.error("%s", exc)
        info["error"] = str(exc)
    info["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return records, info


# -- results -------------------------------------------------------------------------------------


def write_results(
    args: argparse.Namespace,
    started: datetime,
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
    schedule: Sequence[Slot],
    records: list[Record],
    servers: list[dict[str, Any]],
) -> int:
    arm_names = [a.name for a in args.arms]
    phase_names = [p.name for p in phases]
    over_repeats = repeats.repeat_report(
        records, arm_names, args.baselines, phase_names, order_names(args), args.drift_bound
    )
    for arm in over_repeats.drifted:
        logger.warning("%s: its repeats disagree beyond --drift-bound (see summary.md)", arm)
    records = records + oracle_records(records)
    report_arms = [*arm_names, ORACLE]
    table = summaries(records, phase_names, report_arms)
    auto_arms = [a.name for a in args.arms if a.name not in args.baselines]
    ratio_table = ratios(records, phase_names, auto_arms, args.baselines)
    lag = {
        arm: max(
            (
                r.sent_s - r.scheduled_s
                for r in records
                if r.sample.arm == arm and r.scheduled_s is not None
            ),
            default=None,
        )
        for arm in arm_names
    }
    text = "\n".join(
        [
            f"# `{shlex.join(['python', '-m', 'bench.load_phases', *args.argv])}`",
            "",
            f"{started.isoformat(timespec='seconds')}; {len(prompts)} prompts "
            f"(split {args.split}), max_tokens {args.max_tokens}, seed {args.seed}; "
            f"one fresh server per arm: {not args.shared_server and not args.paired}; "
            f"paired (both servers up, phase by phase): {args.paired}; {args.repeats} repeats.",
            "",
            schedule_markdown(phases, schedule),
            "",
            "Largest delay of a send past its scheduled time: "
            + ", ".join(f"{arm} {ms_cell(v)} ms" for arm, v in lag.items()),
            "",
            over_repeats.markdown(),
            "## Every repeat pooled",
            "",
            markdown(table, ratio_table),
        ]
    )
    print(text)

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, "-m", "bench.load_phases", *args.argv]),
        "settings": _settings(args),
        "phases": [asdict(p) for p in phases],
        "prompts": {"path": str(args.prompts), "split": args.split, "ids": [p.id for p in prompts]},
        "schedule": [asdict(s) for s in schedule],
        "servers": servers,
        "send_lag_max_s": lag,
        "summary": {
            phase: {arm: s.to_json() for arm, s in by_arm.items()}
            for phase, by_arm in table.items()
        },
        # Both pool every repeat (a slot pairs with the same slot of the same repeat).
        "ratios": ratio_table,
        "repeats": over_repeats.to_json(),
        "samples": [r.to_json() for r in records],
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "summary.md").write_text(text + "\n")
    chart_table = {
        0: {phase: {a: s.base for a, s in by_arm.items()} for phase, by_arm in table.items()}
    }
    report.chart(chart_table, 0, out / "latency.png", f"{args.model_name}: mean e2e per phase")
    logger.info("wrote %s, summary.md and latency.png", out / "results.json")
    return 1 if any("error" in s for s in servers) else 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key == "argv":
            continue
        if key == "arms":
            value = [asdict(a) for a in value]
        settings[key] = str(value) if isinstance(value, Path) else value
    return settings


# -- command line --------------------------------------------------------------------------------

SMOKE_DEFAULTS: dict[str, Any] = {
    "quiet1": (2, 1.0),
    "burst": (3, 0.2),
    "quiet2": (2, 1.0),
    "steady": (3, 2.0),
    "max_tokens": 8,
    "warmup": 1,
    "arm_names": "never,auto",
}


def _pair(text: str) -> tuple[int, float]:
    try:
        count, value = text.split(",")
        pair = (int(count), float(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected COUNT,NUMBER, got {text!r}") from exc
    if pair[0] < 0 or pair[1] < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative numbers, got {text!r}")
    return pair


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load_phases",
        description="Replay a seeded open-loop schedule (quiet, burst, quiet, steady) against "
        "specgate, one server per arm, and compare never / always / auto.",
    )
    parser.add_argument("--prompts", type=Path, default=REPO / "bench" / "prompts.jsonl")
    parser.add_argument(
        "--split",
        choices=("tune", "report", "all"),
        default="report",
        help="only the prompts of this split (the prompt file's `split` field)",
    )
    parser.add_argument(
        "--quiet1", type=_pair, default=(10, 5.0), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--burst", type=_pair, default=(24, 0.35), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--quiet2", type=_pair, default=(10, 5.0), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--steady",
        type=_pair,
        default=(24, 8.0),
        metavar="N,C",
        help="closed loop: requests, concurrency",
    )
    parser.add_argument(
        "--single",
        type=int,
        default=0,
        metavar="N",
        help="after the others, a closed loop of N requests one at a time",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=128, metavar="N", help="override every max_tokens"
    )
    parser.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every answer exactly --max-tokens long (compare equal work)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the schedule, and requests that set none (-1: send none)",
    )
    parser.add_argument(
        "--arms",
        dest="arm_names",
        metavar="LIST",
        default=DEFAULT_ARMS,
        help=f"comma-separated, from {', '.join(a.name for a in ARM_TABLE)}; "
        + "; ".join(f"'{name}' for {arms}" for name, arms in ARM_SETS.items()),
    )
    parser.add_argument(
        "--baselines",
        metavar="LIST",
        default=None,
        help="arms the others are compared with (the best of them per statistic; over "
        "repeats also each alone, and the first is the other baselines' reference); default "
        "never,always, or with a named --arms set every vLLM arm and never-one",
    )
    parser.add_argument(
        "--repeats",
        type=_positive_int,
        default=1,
        metavar="R",
        help="run every arm R times, each on a fresh server, in interleaved rounds; report "
        "medians and spreads over the repeats",
    )
    parser.add_argument(
        "--drift-bound",
        type=float,
        default=repeats.DEFAULT_DRIFT_BOUND,
        metavar="SHARE",
        help="flag an arm whose overall mean e2e differs across repeats by more than this "
        "share of its median ((max-min)/median)",
    )
    parser.add_argument(
        "--warmup", type=int, default=4, help="unrecorded requests per arm before its schedule"
    )
    parser.add_argument(
        "--shared-server",
        action="store_true",
        help="run arms with the same server args on one server, one after another (auto then "
        "learns from the other arms' traffic)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a quick check: phases of 2-3 requests, max_tokens 8, warmup 1, arms never,auto "
        "(explicit flags still win)",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="two arms, both servers up at once: each phase sent to one then the other, the "
        "first alternating, ratios taken round by round (bench/load_paired.py)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/load_phases/<run id>/"
    )
    parser.add_argument("--model-name", default=MODEL_NAME, help="served model id")
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="for vLLM's server")
    parser.add_argument("--vllm-args", default="", help="extra flags for vLLM's server")
    parser.add_argument("--port", type=int, default=0, help="server port (0: a free one)")
    parser.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument(
        "--specgate-args",
        default="",
        help="extra flags for python -m app (after --routing-exploration 0 and the arm's own)",
    )
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.smoke:
        parser.set_defaults(**SMOKE_DEFAULTS)
    args = parser.parse_args(argv)
    args.argv = argv
    table = {a.name: a for a in ARM_TABLE}
    named_set = args.arm_names in ARM_SETS
    if named_set:
        args.arm_names = ARM_SETS[args.arm_names]
    names = [n.strip() for n in args.arm_names.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--arms: each of {', '.join(table)} at most once, got {args.arm_names!r}")
    args.arms = [table[n] for n in names]
    if args.baselines is None:
        baselines = [a for a in names if a.startswith("vllm") or a == "never-one"]
        args.baselines = baselines if named_set else list(FIXED_ARMS)
    else:
        args.baselines = [n.strip() for n in args.baselines.split(",") if n.strip()]
    if args.steady[0] and args.steady[1] < 1:
        parser.error("--steady needs a concurrency of 1 or more")
    if args.drift_bound <= 0:
        parser.error("--drift-bound must be above 0")
    if args.paired and (len(args.arms) != 2 or args.shared_server):
        parser.error("--paired takes exactly two arms, each on its own server")
    args.request_seed = None if args.seed < 0 else args.seed
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    prompts = load_prompts(args.prompts, None, args.split)
    if not prompts:
        raise SystemExit(f"no prompts of split {args.split!r} in {args.prompts}")
    phases = phase_plan(args)
    schedule = build_schedule(phases, prompts, args.seed)
    logger.info(
        "%d prompts (split %s), %d scheduled requests, arms %s",
        len(prompts),
        args.split,
        len(schedule),
        ", ".join(a.name for a in args.arms),
    )
    if args.dry_run:
        print(schedule_markdown(phases, schedule))
        for slot in schedule:
            print(f"{slot.index:3d} {slot.phase:7s} {s_cell(slot.at_s):>7s} {slot.prompt_id}")
        print(
            f"servers in run order ({args.repeats} repeats, baselines "
            f"{', '.join(args.baselines)}): {repeats.order_markdown(order_names(args))}"
        )
        return 0
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with recorded_run("bench.load_phases", args.out_dir, args.argv) as run:
        args.out_dir = run.folder
        try:
            run_arms = run_paired if args.paired else run_all
            records, servers = run_arms(args, schedule, phases, prompts)
        except KeyboardInterrupt:
            logger.error("interrupted; the servers are stopped, no results written")
            run.outcome = "interrupted"
            return 130
        code = write_results(args, run.started, phases, prompts, schedule, records, servers)
        run.outcome = "completed" if code == 0 else "failed"
        return code


if __name__ == "__main__":
    raise SystemExit(main())
