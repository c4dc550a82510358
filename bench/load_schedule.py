"""The schedule every arm replays: quiet, burst, quiet (open loop: each request at its
time), then a steady closed loop; one seeded timeline of (time, prompt) for all arms."""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench.client import Prompt
from bench.report import s_cell


@dataclass(frozen=True)
class Phase:
    name: str
    requests: int
    # Open loop: exponential inter-arrival gaps of this mean. None: a closed loop.
    mean_gap_s: float | None = None
    concurrency: int | None = None  # closed loop: requests kept in flight

    @property
    def open_loop(self) -> bool:
        return self.mean_gap_s is not None


@dataclass(frozen=True)
class Slot:
    """One scheduled request: every arm sends this prompt at this time (open loop)."""

    index: int
    phase: str
    prompt_id: str
    at_s: float | None  # offset from the schedule's start; None in the closed-loop phase


def phase_plan(args: argparse.Namespace) -> list[Phase]:
    (q1_n, q1_gap), (b_n, b_gap), (q2_n, q2_gap) = args.quiet1, args.burst, args.quiet2
    steady_n, steady_c = args.steady
    phases = [
        Phase("quiet1", q1_n, mean_gap_s=q1_gap),
        Phase("burst", b_n, mean_gap_s=b_gap),
        Phase("quiet2", q2_n, mean_gap_s=q2_gap),
        Phase("steady", steady_n, concurrency=int(steady_c)),
        Phase("single", args.single, concurrency=1),
    ]
    return [p for p in phases if p.requests > 0]


def build_schedule(phases: Sequence[Phase], prompts: Sequence[Prompt], seed: int) -> list[Slot]:
    """The open-loop phases share one timeline (the first request at 0, then a gap drawn with
    the mean of the next request's phase); the closed-loop phase comes after it.

    Prompts are dealt from seeded shuffles of the whole set, a fresh shuffle each time the
    last runs out, so no prompt repeats before every other has been used once.
    """
    gaps = random.Random(f"load_phases:gaps:{seed}")
    deck_rng = random.Random(f"load_phases:prompts:{seed}")
    deck: list[Prompt] = []
    slots: list[Slot] = []
    at = 0.0
    for phase in phases:
        for _ in range(phase.requests):
            if not deck:
                deck = deck_rng.sample(list(prompts), len(prompts))
            prompt = deck.pop()
            scheduled: float | None = None
            if phase.open_loop:
                assert phase.mean_gap_s is not None
                if any(s.at_s is not None for s in slots) and phase.mean_gap_s > 0:
                    at += gaps.expovariate(1.0 / phase.mean_gap_s)
                scheduled = round(at, 3)
            slots.append(Slot(len(slots), phase.name, prompt.id, scheduled))
    return slots


def schedule_markdown(phases: Sequence[Phase], schedule: Sequence[Slot]) -> str:
    lines = [
        "| phase | requests | loop | mean gap s / concurrency | first s | last s |",
        "|---|--:|---|--:|--:|--:|",
    ]
    for p in phases:
        times = [s.at_s for s in schedule if s.phase == p.name and s.at_s is not None]
        shape = f"{p.mean_gap_s:g}" if p.open_loop else f"{p.concurrency}"
        lines.append(
            f"| {p.name} | {p.requests} | {'open' if p.open_loop else 'closed'} | {shape} "
            f"| {s_cell(min(times)) if times else '-'} | {s_cell(max(times)) if times else '-'} |"
        )
    return "\n".join(lines)
