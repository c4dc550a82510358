"""Run every simulated scenario and write the results: python -m bench.gpu_sim

Everything it reports is simulated: step costs come from aiconfigurator-core's per-operation
times measured by NVIDIA for vLLM on H200s, not from a GPU this project ran. `--quick` runs a
short version (one machine, fewer requests) for CI. Writes results.json, summary.md,
latency.png and the manifest to bench/results/gpu_sim/<run id>/ (or `--out-dir`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu_sim import report
from bench.gpu_sim.arms import Specgate
from bench.gpu_sim.costs import aiconfigurator_version
from bench.gpu_sim.engine import HOST_MS_PER_STEP, Simulation, phase_traffic
from bench.gpu_sim.measures import by_phase
from bench.gpu_sim.scenarios import (
    GPU,
    MACHINES,
    MIX_CONCURRENCY,
    STEADY,
    Machine,
    arms,
    changing_load,
    pricer,
    setup,
    steady,
)
from bench.gpu_sim.workload import LENGTHS, Phase, RequestMaker
from bench.manifest import recorded_run


def scenarios(
    machine: Machine, scale: float, quick: bool
) -> dict[str, tuple[list[Phase], dict[str, float] | None]]:
    made: dict[str, tuple[list[Phase], dict[str, float] | None]] = {
        "changing": (changing_load(machine.pace, scale), None),
    }
    levels = (1, 16, 128) if quick else STEADY
    for concurrency in levels:
        made[f"steady-c{concurrency}"] = (steady(concurrency, scale), None)
    if not quick:
        for workload in LENGTHS:
            made[f"mix-{workload}"] = (steady(MIX_CONCURRENCY, scale), {workload: 1.0})
    return made


def run_machine(machine: Machine, scale: float, seed: int, quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"scenarios": {}, "specgate_step_cost": {}}
    for upper in (False, True):
        engine = setup(machine, upper_bound=upper)
        for name, (phases, mix) in scenarios(machine, scale, quick).items():
            if upper and name != "changing":
                continue
            label = f"{name}-upper-bound" if upper else name
            results: dict[str, Any] = {}
            for arm_name, make_arm in arms(engine).items():
                arm = make_arm()
                maker = RequestMaker(machine.method, seed, mix)
                arrivals, follow, phase_of = phase_traffic(phases, maker)
                simulation = Simulation(arm.setup, arm)
                simulation.run(arrivals, follow)
                results[arm_name] = by_phase(simulation.finished, phase_of)
                results[arm_name]["engine"] = {
                    "steps": simulation.log.steps,
                    "draft_tokens": simulation.log.draft_tokens,
                    "accepted_tokens": simulation.log.accepted_tokens,
                }
                if isinstance(arm, Specgate) and name == "changing" and not upper:
                    out["specgate_step_cost"][arm_name] = arm.planner.step_cost.snapshot()
                    out["specgate_class_priors"] = {
                        workload.value: arm.policy.learner.acceptance_prior(workload)
                        for workload in arm.policy.learner.classes
                    }
            out["scenarios"][label] = results
        if quick:
            break
    out["kv_tokens"] = setup(machine).kv_tokens
    target = pricer(machine.model, machine.tp)
    out["batch1_step_ms"] = round(target.step_ms(1, 1, 1024), 3)
    return out


def reality_check() -> dict[str, Any]:
    """The simulator's batch-1 step for Llama-3.1-8B on an H100 against a published vLLM
    figure (no GPU that runs vLLM was at hand)."""
    from bench.gpu_sim.costs import StepPricer

    h100 = StepPricer("meta-llama/Meta-Llama-3.1-8B", "h100_sxm", 1)
    kernels = h100.step_ms(1, 1, 1024)
    return {
        "model": "Llama-3.1-8B, bf16, TP 1, H100 SXM, batch 1, context ~1k",
        "simulated_itl_ms": round(kernels + HOST_MS_PER_STEP, 3),
        "simulated_kernels_only_ms": round(kernels, 3),
        "published_itl_ms": 7.07,
        "published_source": (
            "vLLM issue #20780 (MT-bench, max-concurrency 1, no speculation, TPOT 7.07 ms; "
            "vLLM main, July 2025)"
        ),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one machine, short scenarios (CI)")
    parser.add_argument("--scale", type=float, default=1.0, help="requests per scenario, scaled")
    parser.add_argument("--seed", type=int, default=3, help="the traffic (3: the committed run)")
    parser.add_argument("--machines", default=",".join(m.name for m in MACHINES))
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/gpu_sim/<run id>/"
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MACHINES if m.name in args.machines.split(",")]
    if args.quick:
        chosen, args.scale = chosen[:1], min(args.scale, 0.2)
    with recorded_run("bench.gpu_sim", args.out_dir, argv) as run:
        started = time.perf_counter()
        machines = {}
        for machine in chosen:
            began = time.perf_counter()
            machines[machine.name] = run_machine(machine, args.scale, args.seed, args.quick)
            print(f"{machine.name}: {time.perf_counter() - began:.1f} s", file=sys.stderr)
        results = {
            "simulated": True,
            "aiconfigurator_core": aiconfigurator_version(),
            "data_source": (
                f"aiconfigurator-core {aiconfigurator_version()} performance database, system "
                f"{GPU}, backend vllm (per-operation times measured by NVIDIA for vLLM 0.24.0)"
            ),
            "command": run.command,
            "commit": run.git["commit"] or "unknown",
            "seed": args.seed,
            "scale": args.scale,
            "host_ms_per_step": HOST_MS_PER_STEP,
            "reality_check": reality_check(),
            "machines": machines,
            "wall_s": round(time.perf_counter() - started, 1),
        }
        results["aims"] = report.aims(results)
        out: Path = run.folder
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        (out / "summary.md").write_text(report.markdown(results))
        report.chart(results, out / "latency.png")
        print(report.markdown(results))


if __name__ == "__main__":
    main()
