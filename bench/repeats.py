"""Repeats of bench.load_phases: the interleaved run order, medians and spreads over repeats,
ratios taken round by round, and the drift flag.

One open-loop run of an arm is noisy: a burst's queue, and so its tail, depends on where a few
slow requests happen to land, and the machine itself drifts (other load, caches, clocks). One
run's ratio therefore cannot tell a 5% difference from noise. Running every arm R times, in
rounds, and reading the median and the spread of R values says how much a figure moves by
itself. Ratios are taken within a round (each arm over its baseline from the same round), so
slow drift across the whole run cancels in each ratio instead of landing on whichever arm ran
late.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bench.client import Sample
from bench.report import ALL, percentile

# The open-loop phases together: the load that changes (issue 30's check reads these).
CHANGING = "changing"
CHANGING_PHASES = ("quiet1", "burst", "quiet2")
DEFAULT_DRIFT_BOUND = 0.12

T = TypeVar("T")


class Measured(Protocol):
    """What the aggregation reads of a load_phases Record (kept apart to avoid a cycle)."""

    phase: str
    slot: int
    repeat: int
    sample: Sample


# arm -> repeat -> slot -> the served request
Served = dict[str, dict[int, dict[int, Measured]]]
Statistic = Callable[[Sequence[float]], float]


def _p90(values: Sequence[float]) -> float:
    return percentile(values, 0.9) or 0.0


STATISTICS: dict[str, Statistic] = {"mean": statistics.fmean, "p90": _p90}


# -- the run order -------------------------------------------------------------------------------


def interleaved(items: Sequence[T], repeats: int) -> list[tuple[int, T]]:
    """(repeat, item) in run order: round r runs every item once, starting r places further
    along the list. Interleaving spreads the machine's drift over every arm alike; rotating
    keeps any arm from always running first (on a machine that has just been idle)."""
    order: list[tuple[int, T]] = []
    for repeat in range(repeats):
        shift = repeat % len(items) if items else 0
        order += [(repeat, item) for item in [*items[shift:], *items[:shift]]]
    return order


# -- medians and spreads -------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One figure over repeats: repeat -> value, and its median and extremes."""

    values: dict[int, float]

    @property
    def median(self) -> float:
        return statistics.median(self.values.values())

    @property
    def low(self) -> float:
        return min(self.values.values())

    @property
    def high(self) -> float:
        return max(self.values.values())

    @property
    def relative(self) -> float | None:
        """(max - min) / median: how far apart the repeats are, as a share of the figure."""
        return (self.high - self.low) / self.median if self.median else None

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "spread": self.relative,
            "n": len(self.values),
            "by_repeat": {str(r): v for r, v in sorted(self.values.items())},
        }


def spread(values: Mapping[int, float]) -> Spread | None:
    return Spread(dict(values)) if values else None


def phase_groups(phases: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each phase alone, the changing load (the open-loop phases that ran), then all of them."""
    groups: dict[str, tuple[str, ...]] = {p: (p,) for p in phases}
    changing = tuple(p for p in phases if p in CHANGING_PHASES)
    if changing:
        groups[CHANGING] = changing
    groups[ALL] = tuple(phases)
    return groups


def served(records: Iterable[Measured]) -> Served:
    """The requests that succeeded, by arm, repeat and slot."""
    by_arm: Served = {}
    for r in records:
        if r.sample.ok and r.sample.e2e_s is not None:
            by_arm.setdefault(r.sample.arm, {}).setdefault(r.repeat, {})[r.slot] = r
    return by_arm


def _e2e(run: Mapping[int, Measured], slots: Iterable[int]) -> list[float]:
    return [run[s].sample.e2e_s or 0.0 for s in sorted(slots)]


def _slots(run: Mapping[int, Measured], phases: Sequence[str]) -> set[int]:
    return {s for s, r in run.items() if r.phase in phases}


# -- per arm -------------------------------------------------------------------------------------


@dataclass
class ArmRepeats:
    """One arm's mean and p90 e2e per group of phases, each over the repeats it ran."""

    arm: str
    repeats: list[int]
    errors: int
    figures: dict[str, dict[str, Spread]]  # group -> statistic -> over repeats
    drift: float | None  # the relative spread of the overall mean
    drifted: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "repeats": self.repeats,
            "errors": self.errors,
            "drift": self.drift,
            "drifted": self.drifted,
            "groups": {
                group: {f"{stat}_s": s.to_json() for stat, s in by_stat.items()}
                for group, by_stat in self.figures.items()
            },
        }


def arm_repeats(
    records: Sequence[Measured],
    arms: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    drift_bound: float = DEFAULT_DRIFT_BOUND,
) -> dict[str, ArmRepeats]:
    """Each arm's own figures per repeat (over the requests it served), as spreads."""
    ok = served(records)
    result: dict[str, ArmRepeats] = {}
    for arm in arms:
        runs = ok.get(arm, {})
        figures: dict[str, dict[str, Spread]] = {}
        for group, phases in groups.items():
            per_repeat = {r: _e2e(run, _slots(run, phases)) for r, run in runs.items()}
            for stat, fn in STATISTICS.items():
                found = spread({r: fn(v) for r, v in per_repeat.items() if v})
                if found is not None:
                    figures.setdefault(group, {})[stat] = found
        overall = figures.get(ALL, {}).get("mean")
        drift = overall.relative if overall is not None else None
        result[arm] = ArmRepeats(
            arm=arm,
            repeats=sorted(runs),
            errors=sum(1 for r in records if r.sample.arm == arm and not r.sample.ok),
            figures=figures,
            drift=drift,
            drifted=is_drifted(drift, drift_bound),
        )
    return result


def is_drifted(drift: float | None, bound: float) -> bool:
    """Repeats that disagree beyond the bound: the arm's figures cannot be read to that
    precision, and ratios against it are suspect."""
    return drift is not None and drift > bound


# -- ratios, round by round ----------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """An arm over one baseline, or over the faster of several (per statistic and round)."""

    arm: str
    over: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.over[0] if len(self.over) == 1 else f"faster of ({', '.join(self.over)})"


def comparisons(arms: Sequence[str], baselines: Sequence[str]) -> list[Comparison]:
    """Every baseline but the first over the first (the reference: how the baselines stand);
    every other arm over each baseline, and over the faster of them when there are several."""
    present = [b for b in baselines if b in arms]
    if not present:
        return []
    found: list[Comparison] = []
    for arm in arms:
        if arm == present[0]:
            continue
        if arm in present:
            found.append(Comparison(arm, (present[0],)))
            continue
        found += [Comparison(arm, (b,)) for b in present]
        if len(present) > 1:
            found.append(Comparison(arm, tuple(present)))
    return found


def round_ratios(
    ok: Served, comparison: Comparison, phases: Sequence[str], statistic: Statistic
) -> dict[int, float]:
    """repeat -> the arm's statistic over the lowest of its baselines', in the same round and
    over the slots of these phases that the arm and every baseline served (one failed request
    must not tilt a ratio). Rounds in which one of them did not run are left out."""
    arms = [comparison.arm, *comparison.over]
    rounds = set.intersection(*(set(ok.get(a, {})) for a in arms))
    ratios: dict[int, float] = {}
    for repeat in sorted(rounds):
        runs = [ok[a][repeat] for a in arms]
        slots = set.intersection(*(_slots(run, phases) for run in runs))
        if not slots:
            continue
        arm_value, *base_values = (statistic(_e2e(run, slots)) for run in runs)
        best = min(base_values)
        if best > 0:
            ratios[repeat] = arm_value / best
    return ratios


@dataclass
class RatioRepeats:
    comparison: Comparison
    figures: dict[str, dict[str, Spread]]  # group -> statistic -> ratio over rounds

    def worst_phase(self, phases: Sequence[str], statistic: str = "mean") -> str | None:
        """The phase whose median ratio is highest: the one the arm loses most in."""
        present = [p for p in phases if statistic in self.figures.get(p, {})]
        return max(present, key=lambda p: self.figures[p][statistic].median, default=None)

    def to_json(self, phases: Sequence[str]) -> dict[str, Any]:
        worst = self.worst_phase(phases)
        return {
            "arm": self.comparison.arm,
            "over": list(self.comparison.over),
            "label": self.comparison.label,
            "groups": {
                group: {stat: s.to_json() for stat, s in by_stat.items()}
                for group, by_stat in self.figures.items()
            },
            "worst_phase_mean": None
            if worst is None
            else {"phase": worst, **self.figures[worst]["mean"].to_json()},
        }


def ratio_repeats(
    records: Sequence[Measured],
    comparisons: Sequence[Comparison],
    groups: Mapping[str, Sequence[str]],
) -> list[RatioRepeats]:
    ok = served(records)
    rows = []
    for comparison in comparisons:
        figures: dict[str, dict[str, Spread]] = {}
        for group, phases in groups.items():
            for stat, fn in STATISTICS.items():
                found = spread(round_ratios(ok, comparison, phases, fn))
                if found is not None:
                    figures.setdefault(group, {})[stat] = found
        if figures:
            rows.append(RatioRepeats(comparison, figures))
    return rows


# -- markdown ------------------------------------------------------------------------------------


def cell(s: Spread | None, digits: int = 2) -> str:
    """median (min-max), or the one value when there is one repeat."""
    if s is None:
        return "-"
    if len(s.values) == 1:
        return f"{s.median:.{digits}f}"
    return f"{s.median:.{digits}f} ({s.low:.{digits}f}-{s.high:.{digits}f})"


def pct_cell(s: Spread | None) -> str:
    relative = s.relative if s is not None else None
    return "-" if relative is None else f"{relative:.0%}"


def drift_warnings(arms: Mapping[str, ArmRepeats], bound: float) -> list[str]:
    return [
        f"**WARNING: drift.** `{a.arm}`'s overall mean e2e differs by {a.drift:.0%} of its "
        f"median across its {len(a.repeats)} repeats ({cell(a.figures[ALL]['mean'])} s), more "
        f"than the bound {bound:.0%}: its figures and every ratio that uses it are uncertain."
        for a in arms.values()
        if a.drifted and a.drift is not None
    ]


def order_markdown(order: Sequence[tuple[int, str]]) -> str:
    rounds: dict[int, list[str]] = {}
    for repeat, name in order:
        rounds.setdefault(repeat, []).append(name)
    return "; ".join(f"r{r}: {', '.join(names)}" for r, names in rounds.items())


def arm_markdown(a: ArmRepeats) -> list[str]:
    lines = [
        f"**{a.arm}**: repeats {', '.join(map(str, a.repeats)) or 'none'}, {a.errors} errors"
        + (" - DRIFTED" if a.drifted else ""),
        "",
        "| phases | mean e2e s: median (min-max) | spread | p90 e2e s: median (min-max) | spread |",
        "|---|--:|--:|--:|--:|",
    ]
    for group, by_stat in a.figures.items():
        mean, p90 = by_stat.get("mean"), by_stat.get("p90")
        lines.append(
            f"| {group} | {cell(mean)} | {pct_cell(mean)} | {cell(p90)} | {pct_cell(p90)} |"
        )
    return [*lines, ""]


def ratio_markdown(rows: Sequence[RatioRepeats], phases: Sequence[str]) -> list[str]:
    if not rows:
        return []
    columns = [(g, stat) for g in (CHANGING, ALL) for stat in STATISTICS]
    columns += [(p, "mean") for p in phases]
    lines = [
        "| arm | over | "
        + " | ".join(f"{g} {stat}" for g, stat in columns)
        + " | worst phase (mean) |",
        "|---|---|" + "--:|" * len(columns) + "---|",
    ]
    for row in rows:
        worst = row.worst_phase(phases)
        worst_text = "-" if worst is None else f"{worst} {cell(row.figures[worst]['mean'], 3)}"
        lines.append(
            f"| {row.comparison.arm} | {row.comparison.label} | "
            + " | ".join(cell(row.figures.get(g, {}).get(stat), 3) for g, stat in columns)
            + f" | {worst_text} |"
        )
    return [*lines, ""]


# -- the whole report ---------------------------------------------------------------------------


@dataclass
class RepeatReport:
    arms: dict[str, ArmRepeats]
    ratios: list[RatioRepeats]
    phases: list[str]
    order: list[tuple[int, str]]  # (repeat, server name) in run order
    drift_bound: float

    @property
    def drifted(self) -> list[str]:
        return [a.arm for a in self.arms.values() if a.drifted]

    def markdown(self) -> str:
        count = len({r for r, _ in self.order})
        lines = [
            f"## Over repeats: {count} per arm, interleaved",
            "",
            f"Run order: {order_markdown(self.order)}.",
            "",
        ]
        warnings = drift_warnings(self.arms, self.drift_bound)
        lines += [line for w in warnings for line in (w, "")]
        for a in self.arms.values():
            lines += arm_markdown(a)
        lines += [
            "Ratios, per round then over rounds: median (min-max) of the arm's figure over the "
            "baseline's from the same round, over the slots both served. `faster of`: the "
            f"lower baseline per statistic and round. `{CHANGING}`: "
            f"{', '.join(CHANGING_PHASES)} together.",
            "",
            *ratio_markdown(self.ratios, self.phases),
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "count": len({r for r, _ in self.order}),
            "order": [{"repeat": r, "server": name} for r, name in self.order],
            "drift_bound": self.drift_bound,
            "drifted": self.drifted,
            "groups": {g: list(p) for g, p in phase_groups(self.phases).items()},
            "arms": {name: a.to_json() for name, a in self.arms.items()},
            "ratios": [row.to_json(self.phases) for row in self.ratios],
        }


def repeat_report(
    records: Sequence[Measured],
    arms: Sequence[str],
    baselines: Sequence[str],
    phases: Sequence[str],
    order: Sequence[tuple[int, str]],
    drift_bound: float = DEFAULT_DRIFT_BOUND,
) -> RepeatReport:
    groups = phase_groups(phases)
    return RepeatReport(
        arms=arm_repeats(records, arms, groups, drift_bound),
        ratios=ratio_repeats(records, comparisons(arms, baselines), groups),
        phases=list(phases),
        order=list(order),
        drift_bound=drift_bound,
    )
