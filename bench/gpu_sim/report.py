"""The simulated comparison's aims, summary and chart, from the results the runner writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIXED = [f"k{k}" for k in range(1, 6)]
SPECGATE_ARMS = ("specgate", "specgate-sized")
# vLLM's suffix arms, on the machines whose drafter is a suffix tree (bench/gpu_sim/scenarios.py).
SUFFIX_ARMS = ("suffix-defaults", "suffix-deep")
AIM_BELOW_STATIC = 0.85
AIM_ORACLE = 1.05
# Issue 31: specgate over suffix trees against vLLM's suffix defaults, from this load up.
AIM_BELOW_SUFFIX_DEFAULTS = 0.85
SUFFIX_AIM_FROM = 32


def _figure(runs: dict[str, Any], arm: str, phase: str, key: str) -> float:
    return float(runs[arm][phase][key])


def _best(runs: dict[str, Any], arms: list[str], phase: str) -> str:
    return min(arms, key=lambda arm: _figure(runs, arm, phase, "e2e_mean_s"))


def _tables(runs: dict[str, Any]) -> list[str]:
    return [arm for arm in runs if arm.startswith("table-")]


def _overall(runs: dict[str, Any]) -> str:
    return "all" if "all" in runs["no-spec"] else next(iter(runs["no-spec"]))


def _peers(changing: dict[str, Any]) -> tuple[str, str, str]:
    """(the overall phase, the best fixed K, the best batch-size table) of a changing-load run."""
    phase = _overall(changing)
    return phase, _best(changing, FIXED, phase), _best(changing, _tables(changing), phase)


def _ratio(runs: dict[str, Any], arm: str, peer: str, key: str = "e2e_mean_s") -> float:
    phase = _overall(runs)
    return round(_figure(runs, arm, phase, key) / _figure(runs, peer, phase, key), 3)


def aims(results: dict[str, Any]) -> dict[str, Any]:
    """Per machine and specgate arm: the issue's aims as ratios (specgate over the peer)."""
    out: dict[str, Any] = {}
    for name, machine in results["machines"].items():
        scenarios = machine["scenarios"]
        changing = scenarios["changing"]
        _, best_k, best_table = _peers(changing)
        steady = {s: r for s, r in scenarios.items() if s.startswith("steady-")}
        for arm in SPECGATE_ARMS:
            steady_vs_none = {s: _ratio(r, arm, "no-spec") for s, r in steady.items()}
            steady_vs_oracle = {s: _ratio(r, arm, "oracle") for s, r in steady.items()}
            out[f"{name}/{arm}"] = {
                "best_fixed_k": best_k,
                "best_table": best_table,
                "changing_vs_best_k": {
                    "mean": _ratio(changing, arm, best_k),
                    "p90": _ratio(changing, arm, best_k, "e2e_p90_s"),
                },
                "changing_vs_best_table": {
                    "mean": _ratio(changing, arm, best_table),
                    "p90": _ratio(changing, arm, best_table, "e2e_p90_s"),
                },
                "changing_vs_oracle": _ratio(changing, arm, "oracle"),
                "changing_vs_no_spec": _ratio(changing, arm, "no-spec"),
                "steady_vs_no_spec_worst": max(steady_vs_none.values()),
                "steady_vs_oracle_worst": max(steady_vs_oracle.values()),
                "steady_vs_no_spec": steady_vs_none,
            }
            if SUFFIX_ARMS[0] in changing:
                out[f"{name}/{arm}"]["steady_vs_suffix_defaults"] = {
                    s: _ratio(r, arm, SUFFIX_ARMS[0]) for s, r in steady.items()
                }
                out[f"{name}/{arm}"]["suffix_defaults_worst_from_32"] = max(
                    _ratio(r, arm, SUFFIX_ARMS[0])
                    for s, r in steady.items()
                    if int(s.removeprefix("steady-c")) >= SUFFIX_AIM_FROM
                )
    return out


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _met(value: float, aim: float) -> str:
    return f"{value:.3f} ({'met' if value <= aim else 'not met'})"


def markdown(results: dict[str, Any]) -> str:
    check = results["reality_check"]
    lines = [
        "# SIMULATED: specgate's draft-length policy on GPUs (issue 21)",
        "",
        "**Every figure here is simulated.** Step costs: "
        f"{results['data_source']}. Host overhead {results['host_ms_per_step']} ms per step. "
        "Acceptance: bench/gpu_sim/acceptance.py (sources there; several are assumptions). "
        f"Command: `{results['command']}` at commit {results['commit'][:12]}, seed "
        f"{results['seed']}, scale {results['scale']}.",
        "",
        "Check against reality: no GPU that can run vLLM was at hand. "
        f"{check['model']}: simulated ITL {check['simulated_itl_ms']} ms "
        f"({check['simulated_kernels_only_ms']} ms of kernels), published "
        f"{check['published_itl_ms']} ms ({check['published_source']}): error "
        f"{(check['simulated_itl_ms'] / check['published_itl_ms'] - 1) * 100:+.1f} %.",
        "",
    ]
    for name, machine in results["machines"].items():
        scenarios = machine["scenarios"]
        changing = scenarios["changing"]
        _, best_k, best_table = _peers(changing)
        suffix = [arm for arm in SUFFIX_ARMS if arm in changing]
        shown = ["no-spec", best_k, best_table, *suffix, "oracle", *SPECGATE_ARMS]
        lines += [
            f"## {name} (SIMULATED)",
            "",
            f"KV capacity {machine['kv_tokens']:,} tokens; batch-1 step "
            f"{machine['batch1_step_ms']} ms (kernels).",
            "",
            "Changing load (quiet, burst, quiet): e2e mean / p90 s, TTFT mean s, ITL mean ms, "
            "throughput tok/s. Best fixed K and best batch-size table chosen by mean e2e.",
            "",
            _row(["phase", "arm", "e2e mean", "e2e p90", "TTFT", "ITL", "tok/s"]),
            _row(["---"] * 7),
        ]
        for phase_name in changing["no-spec"]:
            if phase_name == "engine":
                continue
            for arm in shown:
                f = changing[arm][phase_name]
                lines.append(
                    _row(
                        [
                            phase_name,
                            arm,
                            f["e2e_mean_s"],
                            f["e2e_p90_s"],
                            f["ttft_mean_s"],
                            f["itl_mean_ms"],
                            f["throughput_tok_s"],
                        ]
                    )
                )
        upper = scenarios.get("changing-upper-bound")
        if upper:
            lines += [
                "",
                "The same traffic with verification priced at aiconfigurator's `nextn` "
                "(attention per verified token, the pessimistic bound): e2e mean s, all phases.",
                "",
                _row(["arm", *shown]),
                _row(["---"] * (len(shown) + 1)),
                _row(["e2e mean", *[upper[a]["all"]["e2e_mean_s"] for a in shown]]),
            ]
        steady = {s: r for s, r in scenarios.items() if s.startswith(("steady-", "mix-"))}
        columns = ["no-spec", *FIXED, "best table", *suffix, "oracle", *SPECGATE_ARMS]
        lines += [
            "",
            "Steady load (closed loop) and single-class mixes at c=16: e2e mean s.",
            "",
            _row(["scenario", *columns]),
            _row(["---"] * (len(columns) + 1)),
        ]
        for scenario, runs in steady.items():
            p = _overall(runs)
            table = _best(runs, _tables(runs), p)
            cells = [runs[a][p]["e2e_mean_s"] for a in ["no-spec", *FIXED]]
            cells.append(f"{runs[table][p]['e2e_mean_s']} ({table})")
            cells += [runs[a][p]["e2e_mean_s"] for a in [*suffix, "oracle", *SPECGATE_ARMS]]
            lines.append(_row([scenario, *cells]))
        lines += [
            "",
            f"specgate's learned step-cost line after the changing load: "
            f"{machine['specgate_step_cost'].get('specgate')}; class priors then: "
            f"{machine.get('specgate_class_priors')}.",
            "",
        ]
    lines += [
        "## Aims (SIMULATED)",
        "",
        f"Ratios of specgate's e2e to the peer's; changing load: aim <= {AIM_BELOW_STATIC} "
        f"against the best fixed K and the best table, <= {AIM_ORACLE} against the oracle; "
        "steady: <= 1 against no speculation at every load.",
        "",
        _row(
            [
                "machine / arm",
                "vs best K mean",
                "p90",
                "vs best table mean",
                "p90",
                "vs oracle",
                "steady vs no-spec (worst)",
                "steady vs oracle (worst)",
            ]
        ),
        _row(["---"] * 8),
    ]
    for key, aim in results["aims"].items():
        lines.append(
            _row(
                [
                    key,
                    _met(aim["changing_vs_best_k"]["mean"], AIM_BELOW_STATIC),
                    _met(aim["changing_vs_best_k"]["p90"], AIM_BELOW_STATIC),
                    _met(aim["changing_vs_best_table"]["mean"], AIM_BELOW_STATIC),
                    _met(aim["changing_vs_best_table"]["p90"], AIM_BELOW_STATIC),
                    _met(aim["changing_vs_oracle"], AIM_ORACLE),
                    _met(aim["steady_vs_no_spec_worst"], 1.0),
                    _met(aim["steady_vs_oracle_worst"], AIM_ORACLE),
                ]
            )
        )
    suffix_aims = {
        key: aim for key, aim in results["aims"].items() if "steady_vs_suffix_defaults" in aim
    }
    if suffix_aims:
        levels = list(next(iter(suffix_aims.values()))["steady_vs_suffix_defaults"])
        lines += [
            "",
            f"Over suffix trees: specgate's e2e over vLLM's suffix defaults at each steady load "
            f"(aim <= {AIM_BELOW_SUFFIX_DEFAULTS} from {SUFFIX_AIM_FROM} in flight up).",
            "",
            _row(["machine / arm", *levels, f"worst from {SUFFIX_AIM_FROM}"]),
            _row(["---"] * (len(levels) + 2)),
        ]
        for key, aim in suffix_aims.items():
            ratios = aim["steady_vs_suffix_defaults"]
            worst = aim["suffix_defaults_worst_from_32"]
            lines.append(
                _row([key, *[ratios[s] for s in levels], _met(worst, AIM_BELOW_SUFFIX_DEFAULTS)])
            )
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = results["machines"]
    figure, axes = plt.subplots(1, len(machines), figsize=(5 * len(machines), 4), squeeze=False)
    for axis, (name, machine) in zip(axes[0], machines.items(), strict=True):
        steady = {
            int(s.removeprefix("steady-c")): r
            for s, r in machine["scenarios"].items()
            if s.startswith("steady-")
        }
        levels = sorted(steady)
        for arm in ["k1", "k3", "k5", "oracle", *SPECGATE_ARMS]:
            ratios = [
                steady[c][arm][_overall(steady[c])]["e2e_mean_s"]
                / steady[c]["no-spec"][_overall(steady[c])]["e2e_mean_s"]
                for c in levels
            ]
            axis.plot(levels, ratios, marker="o", label=arm)
        axis.axhline(1.0, color="grey", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_title(name, fontsize=9)
        axis.set_xlabel("requests in flight (steady)")
        axis.set_ylabel("mean e2e / no speculation")
    axes[0][0].legend(fontsize=7)
    figure.suptitle("SIMULATED (aiconfigurator-core step costs, H200): lower is better")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
