"""Paired runs of bench.load_phases (`--paired`): two arms' servers up at once, each phase of
the schedule sent to one and then to the other, which goes first alternating phase by phase
and round by round.

Arm by arm, each arm runs its whole schedule on a fresh server, minutes apart from the other,
and on this machine one arm's figure moves by 15-25 % between rounds a few minutes apart: the
ratio of two arms carries that drift. In a pair the two runs of a phase are seconds apart and
take turns going first, so what the machine does over minutes lands on both alike and cancels
in their ratio (bench/repeats.py takes ratios round by round; here a round is one pass of
every phase over both arms). The servers stay up across rounds, as a deployment's do: what an
arm learns (a step-cost line, suffix trees) it keeps, as it would in one long arm-by-arm run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.client import Prompt
from bench.load_arms import LoadArm, server_spec
from bench.load_replay import Record, run_arm
from bench.load_schedule import Phase, Slot
from bench.servers import ServerProcess, free_port, serve, traced

logger = logging.getLogger("bench.load_phases")

# vLLM's readers keep spinning for a second after their last message before they park
# (shm_broadcast's SpinCondition): the server just measured is left that long, and more,
# before its pair's turn, so that its spinning does not slow the other's first requests.
PAIR_GAP_S = 2.0


def phase_slots(schedule: Sequence[Slot], phase: Phase) -> list[Slot]:
    """One phase's slots, its open-loop times counted from its own first request."""
    slots = [s for s in schedule if s.phase == phase.name]
    times = [s.at_s for s in slots if s.at_s is not None]
    if not times:
        return slots
    first = min(times)
    return [replace(s, at_s=None if s.at_s is None else round(s.at_s - first, 3)) for s in slots]


def pair_order(repeats: int, phases: Sequence[Phase]) -> list[tuple[int, Phase, tuple[int, int]]]:
    """(round, phase, which arm first and second): the first arm alternates from one phase
    to the next and from one round to the next, so neither arm always runs on the heels of
    the other."""
    order = []
    for repeat in range(repeats):
        for index, phase in enumerate(phases):
            first = (repeat + index) % 2
            order.append((repeat, phase, (first, 1 - first)))
    return order


def paired_arms(args: argparse.Namespace) -> tuple[LoadArm, LoadArm]:
    """The two arms (load_phases' parse_args refuses --paired with any other number)."""
    first, second = args.arms
    return first, second


def run_paired(
    args: argparse.Namespace,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
) -> tuple[list[Record], list[dict[str, Any]]]:
    """Both arms' servers started at once and kept up; every round runs each phase on both."""
    arms = paired_arms(args)
    logs = args.out_dir / "logs"
    infos: list[dict[str, Any]] = []
    records: list[Record] = []
    with contextlib.ExitStack() as stack:
        servers: list[ServerProcess] = []
        for arm in arms:
            spec = server_spec(arm, args, logs / arm.name)
            if arm.server == "specgate":
                spec = traced(spec, logs)
            info: dict[str, Any] = {
                "name": spec.name,
                "argv": spec.argv,
                "arms": [arm.name],
                "paired": True,
                "load_avg_before": [round(x, 2) for x in os.getloadavg()],
            }
            server = stack.enter_context(serve(spec, free_port(), logs, args.startup_timeout))
            info["startup_s"] = round(server.startup_s, 1)
            servers.append(server)
            infos.append(info)
        for arm, server in zip(arms, servers, strict=True):
            # The warm-up once per server; each phase after it runs with none.
            asyncio.run(run_arm(server.base_url, arm, [], [], prompts, args, -1))
        for repeat, phase, turns in pair_order(args.repeats, phases):
            slots = phase_slots(schedule, phase)
            for turn in turns:
                arm, server = arms[turn], servers[turn]
                time.sleep(PAIR_GAP_S)
                started = time.perf_counter()
                got = asyncio.run(
                    run_arm(server.base_url, arm, slots, [phase], prompts, args, repeat, 0)
                )
                wall = infos[turn].setdefault("phase_wall_s", {})
                wall[f"r{repeat}:{phase.name}"] = round(time.perf_counter() - started, 1)
                records += got
    for info in infos:
        info["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return records, infos


def paired_names(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The run order as bench/repeats.py reports it: each round, both arms."""
    names = [arm.name for arm in paired_arms(args)]
    return [(repeat, f"{' & '.join(names)} (paired)") for repeat in range(args.repeats)]
