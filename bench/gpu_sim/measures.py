"""Per-phase figures of a simulated run: end-to-end latency, time to first token, inter-token
latency (means and p90s, in seconds and milliseconds) and output throughput."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from bench.gpu_sim.workload import SimRequest


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def summarize(requests: Iterable[SimRequest]) -> dict[str, Any]:
    served = [r for r in requests if r.finished_s is not None and r.first_token_s is not None]
    e2e = [r.finished_s - r.arrival_s for r in served]  # type: ignore[operator]
    ttft = [r.first_token_s - r.arrival_s for r in served]  # type: ignore[operator]
    itl = [
        (r.finished_s - r.first_token_s) * 1000 / (r.output_tokens - 1)  # type: ignore[operator]
        for r in served
        if r.output_tokens > 1
    ]
    start = min(r.arrival_s for r in served)
    end = max(r.finished_s for r in served)  # type: ignore[type-var]
    tokens = sum(r.output_tokens for r in served)
    return {
        "requests": len(served),
        "e2e_mean_s": round(statistics.fmean(e2e), 4),
        "e2e_p90_s": round(p90(e2e), 4),
        "ttft_mean_s": round(statistics.fmean(ttft), 4),
        "ttft_p90_s": round(p90(ttft), 4),
        "itl_mean_ms": round(statistics.fmean(itl), 3),
        "itl_p90_ms": round(p90(itl), 3),
        "throughput_tok_s": round(tokens / max(end - start, 1e-9), 1),  # type: ignore[operator]
    }


def by_phase(requests: list[SimRequest], phase_of: dict[str, str]) -> dict[str, Any]:
    phases: dict[str, list[SimRequest]] = {}
    for request in requests:
        phases.setdefault(phase_of[request.request_id], []).append(request)
    figures = {name: summarize(chosen) for name, chosen in phases.items()}
    if len(phases) > 1:
        figures["all"] = summarize(requests)
    return figures
