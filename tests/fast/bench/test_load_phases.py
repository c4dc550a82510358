"""bench.load_phases without servers: the command line's run order and phases, the pooled
tables keyed by repeat, and what a run with repeats writes, from hand-made records."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import load_phases, load_schedule, load_summary
from bench.client import Sample
from bench.load_replay import Record
from bench.prompt_set import load_prompts


def record(arm: str, repeat: int, slot: int, phase: str, e2e: float) -> Record:
    sample = Sample(arm, 0, repeat, f"p{slot}", "chat", ok=True, e2e_s=e2e)
    return Record(phase, slot, sample, None, 0.0, 0, repeat)


def test_the_changing_load_set_runs_three_arms_in_rotated_rounds() -> None:
    args = load_phases.parse_args(["--arms", "changing-load", "--repeats", "3"])
    assert [a.name for a in args.arms] == ["vllm-plain-all", "never-one", "auto-one"]
    assert args.baselines == ["vllm-plain-all", "never-one"]
    assert load_phases.order_names(args) == [
        (0, "vllm-plain-all"), (0, "never-one"), (0, "auto-one"),
        (1, "never-one"), (1, "auto-one"), (1, "vllm-plain-all"),
        (2, "auto-one"), (2, "vllm-plain-all"), (2, "never-one"),
    ]  # fmt: skip


def test_a_shared_server_is_started_afresh_every_round() -> None:
    args = load_phases.parse_args(["--arms", "never,always", "--shared-server", "--repeats", "2"])
    assert load_phases.order_names(args) == [(0, "never+always"), (1, "never+always")]


def test_a_phase_of_no_requests_is_dropped() -> None:
    args = load_phases.parse_args(["--steady", "0,0"])
    assert [p.name for p in load_schedule.phase_plan(args)] == ["quiet1", "burst", "quiet2"]


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--drift-bound", "0"]])
def test_nonsense_repeat_options_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        load_phases.parse_args(argv)


def test_pooled_tables_pair_a_slot_with_the_same_slot_of_the_same_repeat() -> None:
    # Slot 0 twice: never is faster in repeat 0, always in repeat 1.
    records = [
        record("never", 0, 0, "burst", 1.0),
        record("always", 0, 0, "burst", 2.0),
        record("auto", 0, 0, "burst", 1.0),
        record("never", 1, 0, "burst", 4.0),
        record("always", 1, 0, "burst", 3.0),
        record("auto", 1, 0, "burst", 3.0),
    ]
    oracle = load_summary.oracle_records(records)
    assert [(r.repeat, r.sample.e2e_s) for r in oracle] == [(0, 1.0), (1, 3.0)]
    row = load_summary.ratios(records + oracle, ["burst"], ["auto"])["burst"]["auto"]
    assert row["slots"] == 2
    assert row["arm_mean_s"] == 2.0 and row["mean_over_oracle"] == 1.0
    assert record("auto", 1, 0, "burst", 3.0).to_json()["repeat"] == 1


def test_a_run_with_repeats_writes_pooled_and_per_repeat_figures(tmp_path: Path) -> None:
    argv = ["--arms", "changing-load", "--steady", "0,0", "--repeats", "2", "--out-dir"]
    args = load_phases.parse_args([*argv, str(tmp_path)])
    phases = load_schedule.phase_plan(args)
    prompts = load_prompts(args.prompts, None, args.split)
    schedule = load_schedule.build_schedule(phases, prompts, args.seed)
    # auto-one's second repeat is twice as slow as its first: it drifted.
    speed = {"vllm-plain-all": (1.0, 1.0), "never-one": (1.0, 1.05), "auto-one": (0.9, 1.8)}
    records = [
        record(arm, repeat, slot.index, slot.phase, pace[repeat])
        for arm, pace in speed.items()
        for repeat in (0, 1)
        for slot in schedule
    ]
    code = load_phases.write_results(
        args, datetime.now(UTC), phases, prompts, schedule, records, []
    )
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    # The keys a one-repeat run wrote are still there, over both repeats.
    assert results["summary"]["all"]["auto-one"]["n"] == 2 * len(schedule)
    assert results["ratios"]["all"]["auto-one"]["slots"] == 2 * len(schedule)
    over = results["repeats"]
    assert over["count"] == 2 and over["drifted"] == ["auto-one"]
    never = next(r for r in over["ratios"] if r["arm"] == "never-one")
    assert never["over"] == ["vllm-plain-all"]
    assert never["groups"]["changing"]["mean"]["by_repeat"] == pytest.approx({"0": 1.0, "1": 1.05})
    summary = (tmp_path / "summary.md").read_text()
    assert "**WARNING: drift.** `auto-one`" in summary
    assert {s["repeat"] for s in results["samples"]} == {0, 1}
