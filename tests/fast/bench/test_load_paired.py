"""bench.load_phases --paired without servers: the turns, each phase's own timeline, and the
command line's checks."""

from __future__ import annotations

import itertools

import pytest

from bench import load_paired, load_phases, load_schedule
from bench.client import Prompt
from bench.load_schedule import Slot


def prompts(count: int) -> list[Prompt]:
    return [Prompt(f"p{i}", "chat", "completions", {"prompt": str(i)}) for i in range(count)]


def gaps(slots: list[Slot]) -> list[float]:
    times = [s.at_s for s in slots if s.at_s is not None]
    return [round(b - a, 3) for a, b in itertools.pairwise(times)]


def test_the_first_arm_alternates_phase_by_phase_and_round_by_round() -> None:
    args = load_phases.parse_args(["--arms", "never,auto", "--paired", "--repeats", "2"])
    phases = load_schedule.phase_plan(args)
    order = load_paired.pair_order(args.repeats, phases)
    assert [(r, p.name, turns) for r, p, turns in order] == [
        (0, "quiet1", (0, 1)), (0, "burst", (1, 0)), (0, "quiet2", (0, 1)), (0, "steady", (1, 0)),
        (1, "quiet1", (1, 0)), (1, "burst", (0, 1)), (1, "quiet2", (1, 0)), (1, "steady", (0, 1)),
    ]  # fmt: skip
    # Each arm goes first in half of every phase's pairs.
    for phase in phases:
        firsts = [turns[0] for _, p, turns in order if p is phase]
        assert sorted(firsts) == [0, 1]


def test_each_phase_runs_on_its_own_clock_with_its_gaps_kept() -> None:
    args = load_phases.parse_args(["--quiet1", "3,1.0", "--burst", "4,0.2", "--steady", "2,1"])
    phases = load_schedule.phase_plan(args)
    schedule = load_schedule.build_schedule(phases, prompts(5), seed=0)
    burst = next(p for p in phases if p.name == "burst")
    whole = [s for s in schedule if s.phase == "burst"]
    own = load_paired.phase_slots(schedule, burst)
    assert [s.index for s in own] == [s.index for s in whole]
    assert own[0].at_s == 0.0
    assert gaps(own) == gaps(whole)
    steady = next(p for p in phases if p.name == "steady")
    assert all(s.at_s is None for s in load_paired.phase_slots(schedule, steady))


@pytest.mark.parametrize(
    "argv",
    [
        ["--arms", "never,always,auto", "--paired"],
        ["--arms", "never", "--paired"],
        ["--arms", "never,always", "--paired", "--shared-server"],
    ],
)
def test_paired_takes_two_arms_on_servers_of_their_own(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        load_phases.parse_args(argv)


def test_a_paired_runs_order_names_both_arms_once_a_round() -> None:
    args = load_phases.parse_args(
        ["--arms", "vllm-plain-all,never-one", "--paired", "--repeats", "3"]
    )
    assert load_phases.order_names(args) == [
        (r, "vllm-plain-all & never-one (paired)") for r in range(3)
    ]
