"""What the gateway has measured per workload class: latency per engine, and acceptance.

Estimates start from priors measured on a CPU like the ones specgate is developed on
(../shared/vllm-cpu-notes.md, float32 eager) and move toward what this server observes, as
exponentially weighted averages. They live in memory only: a restart goes back to the
priors, which a few requests per class correct (see README, "Routing").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.engine.types import Route, SpecDecodeStats
from app.routing.classify import WorkloadClass

# (plain, speculative) milliseconds per output token.
CPU_PRIORS: dict[WorkloadClass, tuple[float, float]] = {
    WorkloadClass.STRUCTURED: (90.0, 41.0),  # JSON continuation: 2.2x
    WorkloadClass.CODE_EDIT: (80.0, 60.0),  # copies the supplied code
    WorkloadClass.REWRITE: (80.0, 60.0),  # copies the supplied passage
    WorkloadClass.CODE: (75.0, 76.0),  # fresh code: about even, so plain
    WorkloadClass.OPEN_ENDED: (76.0, 101.0),  # poem at T=1: 0.75x
}


@dataclass
class Average:
    """An exponentially weighted average that trusts its first observations more."""

    value: float | None
    alpha: float
    samples: int = 0

    def observe(self, x: float) -> None:
        # The prior counts as one sample; after a few observations the weight settles at alpha.
        weight = max(self.alpha, 1 / (self.samples + 2))
        self.value = x if self.value is None else self.value + weight * (x - self.value)
        self.samples += 1


@dataclass
class ClassEstimates:
    latency: dict[Route, Average]
    acceptance_rate: Average
    accepted_length: Average  # tokens emitted per verification step, the bonus token included

    def expected_speedup(self) -> float | None:
        plain, speculative = self.latency["plain"].value, self.latency["speculative"].value
        if plain is None or speculative is None or speculative <= 0:
            return None
        return plain / speculative


class Learner:
    def __init__(
        self,
        alpha: float = 0.2,
        priors: dict[WorkloadClass, tuple[float, float]] | None = None,
    ) -> None:
        priors = CPU_PRIORS if priors is None else priors
        self.classes: dict[WorkloadClass, ClassEstimates] = {}
        for workload in WorkloadClass:
            plain, speculative = priors.get(workload, (None, None))
            self.classes[workload] = ClassEstimates(
                latency={
                    "plain": Average(plain, alpha),
                    "speculative": Average(speculative, alpha),
                },
                acceptance_rate=Average(None, alpha),
                accepted_length=Average(None, alpha),
            )

    def observe_latency(self, workload: WorkloadClass, route: Route, ms_per_token: float) -> None:
        self.classes[workload].latency[route].observe(ms_per_token)

    def observe_acceptance(self, workload: WorkloadClass, stats: SpecDecodeStats) -> None:
        if stats.draft_tokens == 0:
            return  # nothing was drafted: no evidence either way
        estimates = self.classes[workload]
        estimates.acceptance_rate.observe(stats.acceptance_rate)
        estimates.accepted_length.observe(stats.accepted_length)

    def expected_speedup(self, workload: WorkloadClass) -> float | None:
        return self.classes[workload].expected_speedup()

    def acceptance(self, workload: WorkloadClass) -> Average:
        return self.classes[workload].acceptance_rate

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {
            workload.value: {
                "plain_ms_per_token": _rounded(estimates.latency["plain"].value),
                "plain_samples": estimates.latency["plain"].samples,
                "speculative_ms_per_token": _rounded(estimates.latency["speculative"].value),
                "speculative_samples": estimates.latency["speculative"].samples,
                "expected_speedup": _rounded(estimates.expected_speedup()),
                "acceptance_rate": _rounded(estimates.acceptance_rate.value),
                "mean_accepted_length": _rounded(estimates.accepted_length.value),
                "acceptance_samples": estimates.acceptance_rate.samples,
            }
            for workload, estimates in self.classes.items()
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
