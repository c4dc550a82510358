"""Predicted Outputs on GPUs, simulated: python -m bench.gpu_sim.predicted_outputs

Issue 42's edit-shaped traffic (bench/edit_traffic.py measures it on this CPU) in the GPU
simulator, on its Llama-3.1-8B / H200 suffix machine (aiconfigurator-core's step costs).
Everything here is simulated, and how the answers follow their predictions is assumed, not
measured:

- `file`: the prompt holds a file and the prediction is that file; the answer is the file
  with 1-3 changed spans of 2-12 tokens. The prediction drafts every position but those:
  at a span's first token it proposes the old text (which misses), and it is placed again
  once the answer has matched 4 of its tokens after the span (app/drafting/
  prediction_drafts.py, ANCHOR_TOKENS); in between, the suffix trees draft as they would
  without it. Without the prediction the trees draft the file from the prompt (the suffix
  method's `edit` acceptance, bench/gpu_sim/acceptance.py).
- `cache`: the prediction is the client's earlier rendering of content the prompt holds in
  another form; one changed value of 1-4 tokens. The trees have nothing to copy (the suffix
  method's `chat` acceptance).
- `wrong`: unrelated text; it proposes at the first position only (a miss), and never again.

Arms, each from nothing learned: vLLM with no speculation; vLLM's suffix decoding at its
defaults (no prediction: vLLM takes none); specgate `auto` over deep trees without the
prediction, and with it (its drafts up to the engine's K, 32, priced by what that request's
prediction drafts have landed). Closed loops at 1-128 in flight; every arm serves the same
requests (common random numbers).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.gpu_sim.acceptance import (
    DraftPattern,
    draw_pattern,
    request_acceptance,
    with_suffix_drafts,
)
from bench.gpu_sim.arms import FixedK, NoSpeculation, Specgate
from bench.gpu_sim.costs import aiconfigurator_version
from bench.gpu_sim.engine import Arm, EngineSetup, Simulation, phase_traffic
from bench.gpu_sim.measures import summarize
from bench.gpu_sim.scenarios import (
    DEEP_SUFFIX,
    DEEP_SUFFIX_K,
    GPU,
    MACHINES,
    SUFFIX_DEFAULTS,
    setup,
    steady,
)
from bench.gpu_sim.workload import RequestMaker, SimRequest
from bench.manifest import recorded_run

KINDS = ("file", "cache", "wrong")
LEVELS = (1, 2, 4, 8, 32, 128)
MACHINE = next(m for m in MACHINES if m.name == "llama-8b-h200-suffix")
# The answer's tokens that must match the prediction again before it drafts after an edit.
ANCHOR_TOKENS = 4
PREDICTION = "specgate+prediction"
VLLM_ARMS = ("vllm-no-spec", SUFFIX_DEFAULTS)


def edit_spans(rng: random.Random, kind: str, length: int) -> list[tuple[int, int]]:
    """The answer's changed spans, [start, end) positions in order, apart from each other."""
    if kind == "wrong" or length < 40:
        return []
    count, (low, high) = (rng.randint(1, 3), (2, 12)) if kind == "file" else (1, (1, 4))
    starts = sorted(rng.sample(range(10, length - 20), count))
    spans: list[tuple[int, int]] = []
    for start in starts:
        if spans and start < spans[-1][1] + ANCHOR_TOKENS:
            continue
        spans.append((start, min(length, start + rng.randint(low, high))))
    return spans


def with_prediction(drafts: DraftPattern, kind: str, spans: list[tuple[int, int]]) -> DraftPattern:
    """`drafts` (the trees' own) where the prediction proposes nothing, the prediction's
    elsewhere."""
    length = len(drafts.lands)
    predicted = [kind != "wrong"] * length
    lands = list(drafts.lands)
    if kind == "wrong":
        predicted[1] = True  # its first proposal, from the start of the prediction: a miss
        lands[1] = False
    for start, end in spans:
        for position in range(start + 1, min(length, end + ANCHOR_TOKENS)):
            predicted[position] = False  # placed again only after the anchor
    if kind != "wrong":
        # The prediction's drafts land, but at each edit's start: there it proposes the old
        # text.
        starts = {start for start, _ in spans}
        for position in range(length):
            if predicted[position]:
                lands[position] = position not in starts
    assert drafts.match is not None and drafts.confidence is not None
    return DraftPattern(
        lands=tuple(lands),
        proposed=tuple(p or q for p, q in zip(predicted, drafts.proposed, strict=True)),
        chance=drafts.chance,
        # A prediction is not bounded by a tree's match: offered as far as the engine's K.
        match=tuple(64 if p else m for p, m in zip(predicted, drafts.match, strict=True)),
        confidence=drafts.confidence,
        predicted=tuple(predicted),
    )


class EditMaker(RequestMaker):
    """Edit-class requests of one kind, with or without their predictions: the same draws
    either way, so every arm serves the same requests."""

    def __init__(self, kind: str, seed: int, predicting: bool) -> None:
        super().__init__("suffix", seed, {"edit": 1.0})
        self.kind, self.predicting = kind, predicting
        self._kind_rng = random.Random(seed * 7919 + KINDS.index(kind))

    def make(self, arrival_s: float) -> SimRequest:
        request = super().make(arrival_s)
        rng = random.Random(self._kind_rng.random())
        length = request.output_tokens
        if self.kind == "cache":  # nothing in the prompt the trees could copy
            phases = [(0, request_acceptance(rng, "suffix", "chat"))]
            request.pattern = with_suffix_drafts(rng, draw_pattern(rng, phases, length), phases)
        spans = edit_spans(rng, self.kind, length)
        request.request_id = f"{self.kind}-{request.request_id}"
        if self.predicting:
            request.pattern = with_prediction(request.pattern, self.kind, spans)
            request.features = replace(request.features, predicted=True)
        return request


def arms(machine_setup: EngineSetup) -> dict[str, tuple[Callable[[], Arm], bool]]:
    """Fresh arms by name, and whether the requests bring their predictions."""
    deep = replace(machine_setup, drafter=DEEP_SUFFIX, k=DEEP_SUFFIX_K)
    return {
        "vllm-no-spec": (lambda: NoSpeculation(machine_setup, "vllm-no-spec"), False),
        SUFFIX_DEFAULTS: (lambda: FixedK(machine_setup, SUFFIX_DEFAULTS, k=machine_setup.k), False),
        "specgate": (lambda: Specgate(deep, "specgate"), False),
        PREDICTION: (lambda: Specgate(deep, PREDICTION), True),
    }


def run(seed: int, scale: float, levels: tuple[int, ...]) -> dict[str, Any]:
    machine_setup = setup(MACHINE)
    cells: dict[str, Any] = {}
    for kind in KINDS:
        for level in levels:
            phases = steady(level, scale)
            cell: dict[str, Any] = {}
            for name, (make_arm, predicting) in arms(machine_setup).items():
                arm = make_arm()
                maker = EditMaker(kind, seed, predicting)
                arrivals, follow, _ = phase_traffic(phases, maker)
                simulation = Simulation(arm.setup, arm)
                simulation.run(arrivals, follow)
                cell[name] = {
                    **summarize(simulation.finished),
                    "steps": simulation.log.steps,
                    "draft_tokens": simulation.log.draft_tokens,
                    "accepted_tokens": simulation.log.accepted_tokens,
                }
            cells[f"{kind}-c{level}"] = cell
    return cells


def ratios(cells: dict[str, Any]) -> dict[str, Any]:
    """Time per output token: with the prediction over vLLM's fastest arm and over specgate
    without it (issue 42's aims, which are set for the CPU)."""
    out: dict[str, Any] = {}
    for name, cell in cells.items():
        itl = {arm: figures["itl_mean_ms"] for arm, figures in cell.items()}
        fastest = min(VLLM_ARMS, key=lambda arm: itl[arm])
        out[name] = {
            "vs_vllm_fastest": round(itl[PREDICTION] / itl[fastest], 3),
            "vllm_fastest": fastest,
            "vs_specgate": round(itl[PREDICTION] / itl["specgate"], 3),
        }
    return out


def markdown(cells: dict[str, Any], ratio: dict[str, Any]) -> str:
    names = list(next(iter(cells.values())))
    lines = [
        "# Predicted Outputs, simulated (Llama-3.1-8B, one H200, aiconfigurator-core costs)",
        "",
        "Mean time per output token (ms); the ratios are with the prediction over vLLM's",
        "fastest arm and over specgate without it. Simulated: the answers' agreement with",
        "their predictions is assumed (bench/gpu_sim/predicted_outputs.py).",
        "",
        "| kind, in flight | " + " | ".join(names) + " | / vLLM's fastest | / specgate |",
        "|---|" + "--:|" * (len(names) + 2),
    ]
    for name, cell in cells.items():
        row = [f"{cell[arm]['itl_mean_ms']:.2f}" for arm in names]
        found = ratio[name]
        row += [f"{found['vs_vllm_fastest']:.3f} ({found['vllm_fastest']})"]
        row += [f"{found['vs_specgate']:.3f}"]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    by_kind = {
        kind: statistics.median(v["vs_specgate"] for k, v in ratio.items() if k.startswith(kind))
        for kind in KINDS
    }
    lines += ["", f"Median over levels, / specgate without it: {json.dumps(by_kind)}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="requests per level, scaled")
    parser.add_argument("--levels", default=",".join(str(n) for n in LEVELS))
    parser.add_argument("--out-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    levels = tuple(int(n) for n in args.levels.split(","))
    with recorded_run("bench.gpu_sim.predicted_outputs", args.out_dir, argv) as recorded:
        started = time.perf_counter()
        cells = run(args.seed, args.scale, levels)
        ratio = ratios(cells)
        results = {
            "simulated": True,
            "data_source": (
                f"aiconfigurator-core {aiconfigurator_version()} performance database, system "
                f"{GPU}, backend vllm; the answers' agreement with their predictions assumed"
            ),
            "machine": MACHINE.name,
            "command": recorded.command,
            "commit": recorded.git["commit"] or "unknown",
            "seed": args.seed,
            "scale": args.scale,
            "cells": cells,
            "ratios": ratio,
            "wall_s": round(time.perf_counter() - started, 1),
        }
        (recorded.folder / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        summary = markdown(cells, ratio)
        (recorded.folder / "summary.md").write_text(summary)
        print(summary)


if __name__ == "__main__":
    main()
