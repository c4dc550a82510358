"""Issue 20's aims, read off a side-by-side run of bench.load_phases.

    python -m bench.aims bench/results/load_phases/20261205T043934Z-f046391/results.json

For each arm that is not a baseline: its mean and p90 end-to-end seconds over the best
baseline's (per statistic, over the slots every compared arm served), for the changing load
(the open-loop phases together), the steady phase, one at a time, and each phase alone.
Repeats (--repeats) are pooled, each slot paired with the same slot of the same repeat; the
results' `repeats` key has the figures per repeat, with medians and spreads.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.report import percentile

GROUPS: dict[str, tuple[str, ...]] = {
    "changing load": ("quiet1", "burst", "quiet2"),
    "steady": ("steady",),
    "one at a time": ("single",),
    "quiet1": ("quiet1",),
    "burst": ("burst",),
    "quiet2": ("quiet2",),
}


# (repeat, slot): a slot's repeats are different requests.
RunSlot = tuple[int, int]


def served(samples: list[dict[str, Any]]) -> dict[str, dict[RunSlot, dict[str, Any]]]:
    by_arm: dict[str, dict[RunSlot, dict[str, Any]]] = {}
    for sample in samples:
        if sample["ok"] and sample["e2e_s"] is not None and sample["arm"] != "oracle":
            key = (sample.get("repeat", 0), sample["slot"])
            by_arm.setdefault(sample["arm"], {})[key] = sample
    return by_arm


def table(results: dict[str, Any]) -> list[str]:
    baselines = results["settings"]["baselines"]
    by_arm = served(results["samples"])
    arms = [a for a in by_arm if a not in baselines]
    lines = [
        "| group | arm | slots | best baseline mean s (arm) | arm mean s | mean ratio "
        "| best baseline p90 s (arm) | arm p90 s | p90 ratio |",
        "|---|---|--:|---|--:|--:|---|--:|--:|",
    ]
    for group, phases in GROUPS.items():
        for arm in arms:
            compared = [arm, *(b for b in baselines if b in by_arm)]
            slots = set.intersection(*(set(by_arm[a]) for a in compared))
            slots = {s for s in slots if by_arm[arm][s]["phase"] in phases}
            if not slots:
                continue
            e2e = {a: [by_arm[a][s]["e2e_s"] for s in sorted(slots)] for a in compared}
            mean = {a: statistics.fmean(v) for a, v in e2e.items()}
            p90 = {a: percentile(v, 0.9) or 0.0 for a, v in e2e.items()}
            best_mean = min((b for b in compared if b != arm), key=mean.__getitem__)
            best_p90 = min((b for b in compared if b != arm), key=p90.__getitem__)
            lines.append(
                f"| {group} | {arm} | {len(slots)} | {mean[best_mean]:.2f} ({best_mean}) "
                f"| {mean[arm]:.2f} | {mean[arm] / mean[best_mean]:.3f} "
                f"| {p90[best_p90]:.2f} ({best_p90}) | {p90[arm]:.2f} "
                f"| {p90[arm] / p90[best_p90]:.3f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    results = json.loads(Path(args[0]).read_text())
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
