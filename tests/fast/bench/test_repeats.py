"""Repeats of bench.load_phases (bench/repeats.py): the interleaved run order, medians and
spreads over repeats, ratios taken round by round, and the drift flag, on hand-made records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from bench import repeats
from bench.client import Sample
from bench.load_replay import Record
from bench.repeats import CHANGING, Comparison, Spread
from bench.report import ALL

PHASES = ["quiet1", "burst", "quiet2", "steady"]


def record(arm: str, repeat: int, slot: int, phase: str, e2e: float | None) -> Record:
    """A served request, or a failed one when e2e is None."""
    ok = e2e is not None
    sample = Sample(arm, 0, repeat, f"p{slot}", "chat", ok=ok, e2e_s=e2e)
    if not ok:
        sample.error = "ReadTimeout"
    return Record(phase, slot, sample, None, 0.0, 0, repeat)


def run(arm: str, repeat: int, e2e_by_phase: Mapping[str, Iterable[float | None]]) -> list[Record]:
    """One run of an arm: slots numbered in phase order, the same numbers every repeat."""
    found, slot = [], 0
    for phase, values in e2e_by_phase.items():
        for e2e in values:
            found.append(record(arm, repeat, slot, phase, e2e))
            slot += 1
    return found


def test_rounds_run_every_arm_once_and_rotate_which_goes_first() -> None:
    order = repeats.interleaved(["a", "b", "c"], 3)
    assert order == [
        (0, "a"), (0, "b"), (0, "c"),
        (1, "b"), (1, "c"), (1, "a"),
        (2, "c"), (2, "a"), (2, "b"),
    ]  # fmt: skip
    # More rounds than arms: the rotation wraps, and each arm still runs once per round.
    longer = repeats.interleaved(["a", "b"], 5)
    for r in range(5):
        assert sorted(arm for rr, arm in longer if rr == r) == ["a", "b"]
    assert [arm for _, arm in longer[::2]] == ["a", "b", "a", "b", "a"]
    assert repeats.interleaved(["a"], 2) == [(0, "a"), (1, "a")]


def test_a_spread_is_the_median_the_extremes_and_their_distance_over_the_median() -> None:
    s = Spread({0: 10.0, 1: 12.0, 2: 11.0, 3: 20.0})
    assert (s.median, s.low, s.high) == (11.5, 10.0, 20.0)
    assert s.relative == pytest.approx(10.0 / 11.5)
    assert s.to_json()["by_repeat"] == {"0": 10.0, "1": 12.0, "2": 11.0, "3": 20.0}
    assert repeats.spread({}) is None
    assert Spread({0: 0.0}).relative is None


def test_groups_add_the_changing_load_and_all_phases() -> None:
    groups = repeats.phase_groups(PHASES)
    assert groups[CHANGING] == ("quiet1", "burst", "quiet2")
    assert groups[ALL] == tuple(PHASES)
    # Only the steady phase ran: there is no changing load to report.
    assert CHANGING not in repeats.phase_groups(["steady"])


def test_an_arm_figures_are_medians_over_its_repeats_of_each_repeat_mean_and_p90() -> None:
    records = [
        *run("never-one", 0, {"quiet1": [1.0, 3.0], "burst": [5.0], "steady": [10.0]}),
        *run("never-one", 1, {"quiet1": [2.0, 4.0], "burst": [6.0], "steady": [10.0]}),
        # A failed request counts as an error, not as a latency.
        *run("never-one", 2, {"quiet1": [3.0, None], "burst": [9.0], "steady": [10.0]}),
    ]
    groups = repeats.phase_groups(["quiet1", "burst", "steady"])
    figures = repeats.arm_repeats(records, ["never-one"], groups)["never-one"]
    assert figures.repeats == [0, 1, 2] and figures.errors == 1
    quiet1 = figures.figures["quiet1"]["mean"]
    assert quiet1.values == {0: 2.0, 1: 3.0, 2: 3.0} and quiet1.median == 3.0
    # The changing load is quiet1 and burst together, without the steady phase.
    changing = figures.figures[CHANGING]["mean"]
    assert changing.values == {0: 3.0, 1: 4.0, 2: 6.0}
    assert changing.relative == pytest.approx((6.0 - 3.0) / 4.0)
    # p90 by linear interpolation, per repeat: [1, 3, 5] -> 4.6.
    assert figures.figures[CHANGING]["p90"].values[0] == pytest.approx(4.6)
    assert figures.figures[ALL]["mean"].values[0] == pytest.approx(19.0 / 4)


def test_ratios_pair_each_round_with_its_own_baseline_run() -> None:
    # The machine slows down from round to round (the baseline doubles each time), and the arm
    # is 10% slower than the baseline of its own round every time: every round says 1.10.
    records = []
    for r, scale in enumerate([1.0, 2.0, 4.0]):
        records += run("base", r, {"quiet1": [scale, 3 * scale], "burst": [5 * scale]})
        records += run("arm", r, {"quiet1": [1.1 * scale, 3.3 * scale], "burst": [5.5 * scale]})
    ok = repeats.served(records)
    ratios = repeats.round_ratios(ok, Comparison("arm", ("base",)), ["quiet1", "burst"], max)
    assert ratios == pytest.approx({0: 1.1, 1: 1.1, 2: 1.1})
    [row] = repeats.ratio_repeats(
        records, [Comparison("arm", ("base",))], repeats.phase_groups(["quiet1", "burst"])
    )
    mean = row.figures[CHANGING]["mean"]
    assert mean.median == pytest.approx(1.1) and mean.relative == pytest.approx(0.0, abs=1e-9)


def test_a_ratio_uses_only_slots_both_arms_served_in_that_round() -> None:
    records = [
        *run("base", 0, {"burst": [2.0, 2.0]}),
        # The arm's slow second request failed for the baseline: it must not count.
        *run("arm", 0, {"burst": [2.0, 8.0]}),
    ]
    records[1] = record("base", 0, 1, "burst", None)
    # A round the baseline did not run (its server failed to start) gives no ratio.
    records += run("arm", 1, {"burst": [3.0, 3.0]})
    ok = repeats.served(records)
    ratios = repeats.round_ratios(ok, Comparison("arm", ("base",)), ["burst"], max)
    assert ratios == {0: 1.0}


def test_the_faster_baseline_is_chosen_per_statistic_and_per_round() -> None:
    # `bursty` has the lower mean (1.6) but the higher p90 (4.0); `even` is 2.5 throughout.
    # The two swap names between rounds, so each round has its own faster baseline per
    # statistic; the arm (2.0 throughout) is over the lower of each statistic in each round.
    bursty, even = [1.0] * 8 + [4.0, 4.0], [2.5] * 10
    records = [
        *run("a", 0, {"burst": bursty}),
        *run("b", 0, {"burst": even}),
        *run("arm", 0, {"burst": [2.0] * 10}),
        *run("a", 1, {"burst": even}),
        *run("b", 1, {"burst": bursty}),
        *run("arm", 1, {"burst": [2.0] * 10}),
    ]
    comparison = Comparison("arm", ("a", "b"))
    [row] = repeats.ratio_repeats(records, [comparison], {"burst": ("burst",)})
    assert row.figures["burst"]["mean"].values == pytest.approx({0: 2.0 / 1.6, 1: 2.0 / 1.6})
    assert row.figures["burst"]["p90"].values == pytest.approx({0: 2.0 / 2.5, 1: 2.0 / 2.5})
    assert comparison.label == "faster of (a, b)"


def test_comparisons_of_the_changing_load_check() -> None:
    found = repeats.comparisons(
        ["vllm-plain-all", "never-one", "auto-one"], ["vllm-plain-all", "never-one"]
    )
    assert [(c.arm, c.over) for c in found] == [
        ("never-one", ("vllm-plain-all",)),
        ("auto-one", ("vllm-plain-all",)),
        ("auto-one", ("never-one",)),
        ("auto-one", ("vllm-plain-all", "never-one")),
    ]
    # A baseline that was not run is left out.
    assert [c.over for c in repeats.comparisons(["never", "auto"], ["never", "always"])] == [
        ("never",)
    ]


def test_the_worst_phase_is_the_one_with_the_highest_median_ratio() -> None:
    # auto-one over never-one: quiet1 0.9, 0.9, 1.3 (one bad round); burst 1.05, 1.1, 1.15.
    # Burst is worse in the typical round, though quiet1 has the single worst one.
    records = []
    for r, quiet1 in enumerate([1.8, 1.8, 2.6]):
        records += run("never-one", r, {"quiet1": [2.0], "burst": [2.0], "quiet2": [2.0]})
        auto = {"quiet1": [quiet1], "burst": [2.1 + 0.1 * r], "quiet2": [2.0]}
        records += run("auto-one", r, auto)
    report = repeats.repeat_report(
        records, ["never-one", "auto-one"], ["never-one"], ["quiet1", "burst", "quiet2"], []
    )
    [row] = report.ratios
    assert row.worst_phase(report.phases) == "burst"
    worst = row.to_json(report.phases)["worst_phase_mean"]
    assert worst["phase"] == "burst"
    assert (worst["median"], worst["max"]) == pytest.approx((1.1, 1.15))


def test_an_arm_whose_repeats_disagree_beyond_the_bound_is_flagged_as_drifted() -> None:
    records = []
    for r, (steady, wobbly) in enumerate([(10.0, 10.0), (10.5, 10.5), (11.0, 12.0)]):
        records += run("steady-arm", r, {"quiet1": [steady]})
        records += run("wobbly-arm", r, {"quiet1": [wobbly]})
    order = repeats.interleaved(["steady-arm", "wobbly-arm"], 3)
    arms = ["steady-arm", "wobbly-arm"]
    report = repeats.repeat_report(records, arms, [], ["quiet1"], order, drift_bound=0.12)
    # (11 - 10) / 10.5 = 0.095 is within 0.12; (12 - 10) / 10.5 = 0.19 is not.
    assert report.arms["steady-arm"].drift == pytest.approx(1.0 / 10.5)
    assert report.drifted == ["wobbly-arm"]
    text = report.markdown()
    [warning] = [line for line in text.splitlines() if "WARNING" in line]
    assert "`wobbly-arm`" in warning and "19%" in warning and "12%" in warning
    assert report.to_json()["arms"]["wobbly-arm"]["drifted"] is True
    assert report.to_json()["drifted"] == ["wobbly-arm"]
    # A looser bound lets both through; one repeat can never drift.
    loose = repeats.repeat_report(records, arms, [], ["quiet1"], order, drift_bound=0.2)
    assert loose.drifted == [] and "WARNING" not in loose.markdown()
    once = [r for r in records if r.repeat == 0]
    assert repeats.repeat_report(once, arms, [], ["quiet1"], order[:2]).drifted == []


def test_the_arm_table_shows_median_and_range_per_phase() -> None:
    records = [
        *run("never-one", 0, {"quiet1": [1.0], "burst": [4.0]}),
        *run("never-one", 1, {"quiet1": [2.0], "burst": [5.0]}),
        *run("never-one", 2, {"quiet1": [3.0], "burst": [6.0]}),
    ]
    report = repeats.repeat_report(records, ["never-one"], [], ["quiet1", "burst"], [])
    rows = {line.split(" | ")[0]: line for line in report.markdown().splitlines()}
    assert rows["| quiet1"] == "| quiet1 | 2.00 (1.00-3.00) | 100% | 2.00 (1.00-3.00) | 100% |"
    assert rows["| changing"].startswith("| changing | 3.50 (2.50-4.50) | 57% |")
