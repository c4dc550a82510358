"""The replay's figures: per phase and arm, latency summaries, the oracle (the faster fixed
arm per slot), and each auto arm's ratios over the better baseline; as tables."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from bench import report
from bench.load_arms import FIXED_ARMS
from bench.load_replay import Record
from bench.report import ms_cell, num_cell, s_cell

ALL = report.ALL
ORACLE = report.ORACLE


@dataclass
class ArmSummary:
    base: report.Summary
    route_shares: dict[str, float]  # x-specgate-route value -> share of served requests
    mean_in_flight: float | None  # this arm's requests open when each was sent
    switched: int  # requests that changed engine mid-stream
    switches: int

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.base),
            "route_shares": self.route_shares,
            "mean_in_flight_at_send": self.mean_in_flight,
            "switched_requests": self.switched,
            "switches": self.switches,
        }


# A slot in one repeat: repeats of the same slot are different requests.
RunSlot = tuple[int, int]  # (repeat, slot)


def oracle_records(records: Iterable[Record]) -> list[Record]:
    """Per slot (and repeat), the faster (e2e) of never and always, where both served it."""
    by_arm: dict[str, dict[RunSlot, Record]] = {arm: {} for arm in FIXED_ARMS}
    for r in records:
        if r.sample.arm in by_arm and r.sample.ok and r.sample.e2e_s is not None:
            by_arm[r.sample.arm][r.repeat, r.slot] = r
    oracle = []
    for key, never in sorted(by_arm["never"].items()):
        always = by_arm["always"].get(key)
        if always is None:
            continue
        assert never.sample.e2e_s is not None and always.sample.e2e_s is not None
        faster = always if always.sample.e2e_s < never.sample.e2e_s else never
        oracle.append(replace(faster, sample=replace(faster.sample, arm=ORACLE)))
    return oracle


def summarize(records: Sequence[Record]) -> ArmSummary:
    ok = [r for r in records if r.sample.ok]
    routes: dict[str, int] = {}
    for r in ok:
        route = r.sample.route or "?"
        routes[route] = routes.get(route, 0) + 1
    return ArmSummary(
        base=report.summarize([r.sample for r in records], None),
        route_shares={k: v / len(ok) for k, v in sorted(routes.items())},
        mean_in_flight=(
            statistics.fmean(r.in_flight_at_send for r in records) if records else None
        ),
        switched=sum(r.sample.switches > 0 for r in ok),
        switches=sum(r.sample.switches for r in ok),
    )


def summaries(
    records: Sequence[Record], phases: Sequence[str], arms: Sequence[str]
) -> dict[str, dict[str, ArmSummary]]:
    """phase (and "all") -> arm -> summary, for the arms with records in that phase."""
    table: dict[str, dict[str, ArmSummary]] = {}
    for phase in [*phases, ALL]:
        table[phase] = {}
        for arm in arms:
            chosen = [r for r in records if r.sample.arm == arm and phase in (ALL, r.phase)]
            if chosen:
                table[phase][arm] = summarize(chosen)
    return table


def ratios(
    records: Sequence[Record],
    phases: Sequence[str],
    auto_arms: Sequence[str],
    baselines: Sequence[str] = FIXED_ARMS,
) -> dict[str, dict[str, dict[str, Any]]]:
    """phase -> auto arm -> its mean and p90 e2e over the better fixed arm's (and the oracle's).

    Over the slots that the auto arm and every fixed arm that ran all served, so one failed
    request does not tilt a mean. "Better fixed" is whichever fixed arm is lower on that
    statistic; with only one fixed arm run, it is that one. Repeats are pooled: a slot of one
    repeat pairs with the same slot of the same repeat (bench/repeats.py takes ratios per
    repeat instead).
    """
    ok: dict[str, dict[RunSlot, Record]] = {}
    for r in records:
        if r.sample.ok and r.sample.e2e_s is not None:
            ok.setdefault(r.sample.arm, {})[r.repeat, r.slot] = r
    fixed = [a for a in baselines if a in ok]
    result: dict[str, dict[str, dict[str, Any]]] = {}
    if not fixed:
        return result
    for phase in [*phases, ALL]:
        for auto in auto_arms:
            if auto not in ok:
                continue
            slots = set(ok[auto]).intersection(*(ok[a] for a in fixed))
            slots = {s for s in slots if phase in (ALL, ok[auto][s].phase)}
            if not slots:
                continue

            def e2e(arm: str, chosen: set[RunSlot] = slots) -> list[float]:
                return [ok[arm][s].sample.e2e_s or 0.0 for s in sorted(chosen)]

            mean = {a: statistics.fmean(e2e(a)) for a in [*fixed, auto]}
            p90 = {a: report.percentile(e2e(a), 0.9) or 0.0 for a in [*fixed, auto]}
            best_mean = min(mean[a] for a in fixed)
            best_p90 = min(p90[a] for a in fixed)
            row: dict[str, Any] = {
                "slots": len(slots),
                "fixed_arms": fixed,
                **{f"{a}_mean_s": mean[a] for a in fixed},
                **{f"{a}_p90_s": p90[a] for a in fixed},
                "best_fixed_mean_s": best_mean,
                "best_fixed_p90_s": best_p90,
                "arm_mean_s": mean[auto],
                "arm_p90_s": p90[auto],
                "mean_over_best_fixed": mean[auto] / best_mean if best_mean else None,
                "p90_over_best_fixed": p90[auto] / best_p90 if best_p90 else None,
                "oracle_mean_s": None,
                "mean_over_oracle": None,
            }
            if ORACLE in ok:
                oracle_slots = slots & set(ok[ORACLE])
                if oracle_slots:
                    oracle_mean = statistics.fmean(e2e(ORACLE, oracle_slots))
                    row["oracle_slots"] = len(oracle_slots)
                    row["oracle_mean_s"] = oracle_mean
                    row["mean_over_oracle"] = (
                        statistics.fmean(e2e(auto, oracle_slots)) / oracle_mean
                        if oracle_mean
                        else None
                    )
            result.setdefault(phase, {})[auto] = row
    return result


def markdown(
    table: dict[str, dict[str, ArmSummary]],
    ratio_table: dict[str, dict[str, dict[str, Any]]],
) -> str:
    lines = [
        "| phase | arm | n | err | e2e mean s | e2e p90 s | TTFT p50 ms | TTFT p90 ms "
        "| ITL p50 ms | ITL p90 ms | routes | in flight | switched |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    for phase, by_arm in table.items():
        for arm, summary in by_arm.items():
            s = summary.base
            routes = ", ".join(f"{k} {v:.2f}" for k, v in summary.route_shares.items()) or "-"
            lines.append(
                f"| {phase} | {arm} | {s.n} | {s.errors} "
                f"| {s_cell(s.e2e_mean_s)} | {s_cell(s.e2e_p90_s)} "
                f"| {ms_cell(s.ttft_p50_s)} | {ms_cell(s.ttft_p90_s)} | {ms_cell(s.itl_p50_s)} "
                f"| {ms_cell(s.itl_p90_s)} | {routes} | {num_cell(summary.mean_in_flight, 1)} "
                f"| {summary.switched} |"
            )
    lines += [
        "",
        f"`{ORACLE}`: per slot, the faster (e2e) of never and always, only over slots both "
        "served. Under load each arm's latencies depend on its own earlier choices, so this is "
        "an approximation, not an attainable policy. `in flight`: the arm's requests still open "
        "when each was sent (mean). `switched`: requests that changed engine mid-stream.",
        "",
    ]
    if ratio_table:
        lines += [
            "| phase | arm | slots | fixed arms | best fixed mean s | arm mean s "
            "| mean / best fixed | best fixed p90 s | arm p90 s | p90 / best fixed "
            "| mean / oracle |",
            "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for phase, rows in ratio_table.items():
            for arm, r in rows.items():
                lines.append(
                    f"| {phase} | {arm} | {r['slots']} | {', '.join(r['fixed_arms'])} "
                    f"| {s_cell(r['best_fixed_mean_s'])} "
                    f"| {s_cell(r['arm_mean_s'])} | {num_cell(r['mean_over_best_fixed'], 3)} "
                    f"| {s_cell(r['best_fixed_p90_s'])} | {s_cell(r['arm_p90_s'])} "
                    f"| {num_cell(r['p90_over_best_fixed'], 3)} "
                    f"| {num_cell(r['mean_over_oracle'], 3)} |"
                )
        lines.append("")
    return "\n".join(lines)
