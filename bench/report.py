"""From samples to summaries: the oracle arm, percentiles, ratios, a markdown report, a chart."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.client import Sample, SpecCounters

ALL = "all"
ORACLE = "oracle"
# Key of one measured prompt: the concurrency level, the repeat and the prompt.
Key = tuple[int, int, str]


@dataclass
class Summary:
    n: int
    errors: int
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    itl_p50_s: float | None
    itl_p90_s: float | None
    e2e_p50_s: float | None
    e2e_p90_s: float | None
    e2e_mean_s: float | None
    tokens_per_s: float | None  # sum of tokens / sum of e2e: the rate one client sees
    speculative_share: float | None  # share of requests the speculative engine served
    acceptance_rate: float | None  # accepted / drafted tokens, speculative responses only
    auto_matches_oracle: float | None  # auto arm only


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no data."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _key(sample: Sample) -> Key:
    return (sample.concurrency, sample.repeat, sample.prompt_id)


def oracle_samples(samples: Iterable[Sample]) -> list[Sample]:
    """Per prompt (and level and repeat), whichever of never and always finished sooner."""
    by_arm: dict[str, dict[Key, Sample]] = {"never": {}, "always": {}}
    for sample in samples:
        if sample.arm in by_arm and sample.ok:
            by_arm[sample.arm][_key(sample)] = sample
    oracle = []
    for key, never in by_arm["never"].items():
        always = by_arm["always"].get(key)
        if always is None:
            continue
        assert never.e2e_s is not None and always.e2e_s is not None
        faster = always if always.e2e_s < never.e2e_s else never
        oracle.append(replace(faster, arm=ORACLE))
    return oracle


def summarize(samples: Sequence[Sample], oracle_routes: dict[Key, str] | None) -> Summary:
    ok = [s for s in samples if s.ok]
    ttft = [s.ttft_s for s in ok if s.ttft_s is not None]
    itl = [s.itl_s for s in ok if s.itl_s is not None]
    e2e = [s.e2e_s for s in ok if s.e2e_s is not None]
    tokens = sum(s.completion_tokens or 0 for s in ok)
    routed = [s for s in ok if s.route is not None]
    spec = _spec_total(s.spec for s in ok if s.route == "speculative")
    matches = None
    if oracle_routes is not None:
        judged = [s for s in ok if _key(s) in oracle_routes]
        if judged:
            hits = sum(s.route == oracle_routes[_key(s)] for s in judged)
            matches = hits / len(judged)
    return Summary(
        n=len(ok),
        errors=len(samples) - len(ok),
        ttft_p50_s=percentile(ttft, 0.5),
        ttft_p90_s=percentile(ttft, 0.9),
        itl_p50_s=percentile(itl, 0.5),
        itl_p90_s=percentile(itl, 0.9),
        e2e_p50_s=percentile(e2e, 0.5),
        e2e_p90_s=percentile(e2e, 0.9),
        e2e_mean_s=statistics.fmean(e2e) if e2e else None,
        tokens_per_s=tokens / sum(e2e) if e2e and sum(e2e) > 0 else None,
        speculative_share=(
            sum(s.route == "speculative" for s in routed) / len(routed) if routed else None
        ),
        acceptance_rate=(
            spec.accepted_tokens / spec.draft_tokens if spec and spec.draft_tokens else None
        ),
        auto_matches_oracle=matches,
    )


def _spec_total(counters: Iterable[SpecCounters | None]) -> SpecCounters | None:
    # Token-weighted: a 2-token response does not weigh as much as a 200-token one.
    present = [c for c in counters if c is not None]
    if not present:
        return None
    total = SpecCounters()
    for c in present:
        total = SpecCounters(
            total.drafts + c.drafts,
            total.draft_tokens + c.draft_tokens,
            total.accepted_tokens + c.accepted_tokens,
        )
    return total


def summaries(
    samples: Sequence[Sample], arms: Sequence[str], classes: Sequence[str], levels: Sequence[int]
) -> dict[int, dict[str, dict[str, Summary]]]:
    """level -> class (and "all") -> arm -> Summary, for the arms that have samples."""
    oracle_routes = {_key(s): s.route or "" for s in samples if s.arm == ORACLE}
    result: dict[int, dict[str, dict[str, Summary]]] = {}
    for level in levels:
        result[level] = {}
        for cls in [*classes, ALL]:
            result[level][cls] = {}
            for arm in arms:
                chosen = [
                    s
                    for s in samples
                    if s.concurrency == level and s.arm == arm and cls in (ALL, s.cls)
                ]
                if chosen:
                    routes = oracle_routes if arm == "auto" else None
                    result[level][cls][arm] = summarize(chosen, routes)
    return result


def ratios(
    samples: Sequence[Sample], classes: Sequence[str], levels: Sequence[int]
) -> dict[int, dict[str, dict[str, float | None]]]:
    """Auto against the best fixed choice and the oracle, over prompts all three arms served.

    Restricting to complete triplets keeps one failed request from tilting a mean.
    """
    result: dict[int, dict[str, dict[str, float | None]]] = {}
    for level in levels:
        by_arm: dict[str, dict[Key, Sample]] = {}
        for s in samples:
            if s.concurrency == level and s.ok and s.e2e_s is not None:
                by_arm.setdefault(s.arm, {})[_key(s)] = s
        needed = ("never", "always", "auto", ORACLE)
        if not all(arm in by_arm for arm in needed):
            continue
        complete = set.intersection(*(set(by_arm[arm]) for arm in needed))
        result[level] = {}
        for cls in [*classes, ALL]:
            keys = [k for k in complete if cls in (ALL, by_arm["auto"][k].cls)]
            if not keys:
                continue
            mean = {
                arm: statistics.fmean(by_arm[arm][k].e2e_s or 0.0 for k in keys) for arm in needed
            }
            best_fixed = min(mean["never"], mean["always"])
            result[level][cls] = {
                "prompts": float(len(keys)),
                "never_mean_s": mean["never"],
                "always_mean_s": mean["always"],
                "auto_mean_s": mean["auto"],
                "oracle_mean_s": mean[ORACLE],
                "auto_over_best_fixed": mean["auto"] / best_fixed if best_fixed else None,
                "auto_over_oracle": mean["auto"] / mean[ORACLE] if mean[ORACLE] else None,
            }
    return result


def gateway_overhead(
    table: dict[int, dict[str, dict[str, Summary]]],
) -> dict[int, dict[str, float | None]]:
    """specgate's forced arms over vLLM's own server on the same engine settings (mean e2e)."""
    result: dict[int, dict[str, float | None]] = {}
    for level, by_class in table.items():
        arms = by_class.get(ALL, {})
        pairs = {
            "never_over_vllm_plain": ("never", "vllm-plain"),
            "always_over_vllm_spec": ("always", "vllm-spec"),
        }
        result[level] = {
            name: _ratio(arms.get(ours), arms.get(theirs)) for name, (ours, theirs) in pairs.items()
        }
    return result


def _ratio(ours: Summary | None, theirs: Summary | None) -> float | None:
    if ours is None or theirs is None or not ours.e2e_mean_s or not theirs.e2e_mean_s:
        return None
    return ours.e2e_mean_s / theirs.e2e_mean_s


# -- markdown ------------------------------------------------------------------------------------


def ms_cell(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def s_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def num_cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(
    table: dict[int, dict[str, dict[str, Summary]]],
    ratio_table: dict[int, dict[str, dict[str, float | None]]],
    overhead: dict[int, dict[str, float | None]],
    throughput: dict[int, dict[str, float]],
) -> str:
    lines: list[str] = []
    for level, by_class in table.items():
        lines += [
            f"### Concurrency {level}",
            "",
            "| class | arm | n | err | TTFT p50 ms | TTFT p90 ms | ITL p50 ms | ITL p90 ms "
            "| e2e p50 s | e2e p90 s | e2e mean s | tok/s | spec share | accept | auto=oracle |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for cls, by_arm in by_class.items():
            for arm, s in by_arm.items():
                lines.append(
                    f"| {cls} | {arm} | {s.n} | {s.errors} | {ms_cell(s.ttft_p50_s)} "
                    f"| {ms_cell(s.ttft_p90_s)} | {ms_cell(s.itl_p50_s)} | {ms_cell(s.itl_p90_s)} "
                    f"| {s_cell(s.e2e_p50_s)} | {s_cell(s.e2e_p90_s)} | {s_cell(s.e2e_mean_s)} "
                    f"| {num_cell(s.tokens_per_s, 1)} | {num_cell(s.speculative_share)} "
                    f"| {num_cell(s.acceptance_rate)} | {num_cell(s.auto_matches_oracle)} |"
                )
        lines.append("")
        if level in ratio_table:
            lines += [
                "| class | prompts | never s | always s | auto s | oracle s "
                "| auto / best fixed | auto / oracle |",
                "|---|--:|--:|--:|--:|--:|--:|--:|",
            ]
            for cls, r in ratio_table[level].items():
                lines.append(
                    f"| {cls} | {int(r['prompts'] or 0)} | {s_cell(r['never_mean_s'])} "
                    f"| {s_cell(r['always_mean_s'])} | {s_cell(r['auto_mean_s'])} "
                    f"| {s_cell(r['oracle_mean_s'])} | {num_cell(r['auto_over_best_fixed'], 3)} "
                    f"| {num_cell(r['auto_over_oracle'], 3)} |"
                )
            lines.append("")
        extra = overhead.get(level, {})
        if any(v is not None for v in extra.values()):
            lines.append(
                "Gateway vs vLLM's own server (mean e2e): "
                + ", ".join(f"{k} = {num_cell(v, 3)}" for k, v in extra.items())
            )
            lines.append("")
        if throughput.get(level):
            lines.append(
                "Aggregate output tok/s (tokens / pass wall time): "
                + ", ".join(f"{arm} {tps:.1f}" for arm, tps in throughput[level].items())
            )
            lines.append("")
    return "\n".join(lines)


def to_jsonable(table: dict[int, dict[str, dict[str, Summary]]]) -> dict[str, Any]:
    return {
        str(level): {
            cls: {arm: asdict(s) for arm, s in by_arm.items()} for cls, by_arm in t.items()
        }
        for level, t in table.items()
    }


# -- chart ---------------------------------------------------------------------------------------


def chart(
    table: dict[int, dict[str, dict[str, Summary]]], level: int, path: Path, title: str
) -> None:
    """Grouped bars: mean e2e latency per class (groups) and arm (bars) at one level."""
    import matplotlib

    matplotlib.use("Agg")  # no display on these machines
    import matplotlib.pyplot as plt

    by_class = table[level]
    classes = list(by_class)
    arms: list[str] = []
    for by_arm in by_class.values():
        arms += [a for a in by_arm if a not in arms]
    width = 0.8 / max(len(arms), 1)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(classes) + 2), 4.8))
    for i, arm in enumerate(arms):
        xs = [c + (i - (len(arms) - 1) / 2) * width for c in range(len(classes))]
        ys = [
            (by_class[cls][arm].e2e_mean_s or 0.0) if arm in by_class[cls] else 0.0
            for cls in classes
        ]
        ax.bar(xs, ys, width, label=arm, hatch="//" if arm == ORACLE else None)
    ax.set_xticks(range(len(classes)), classes)
    ax.set_ylabel("mean end-to-end latency (s)")
    ax.set_title(title)
    ax.legend(ncols=min(len(arms), 6), fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
