"""Milliseconds per output token as a function of the load on the device, learned per route.

Both embedded engines share one device, so a request on either slows every other. Each
route's time per token is modelled as linear in the sequences in flight on each engine:

    ms_per_token[route] = base + per_plain * plain_in_flight + per_spec * spec_in_flight

where `in_flight` counts the other sequences the request shares the device with. A
speculative step verifies up to K+1 tokens per sequence, so a speculative sequence can weigh
more than a plain one, and drafts land less often in a crowded batch (the routing benchmark
of 2026-12-02, since retired, before the CPU sampler fix: ngram acceptance 0.36 alone, 0.05
at concurrency 8); the model learns the slopes rather than assume them. The coefficients are
fitted online by recursive least squares with forgetting, started from priors that act as a
few pseudo-observations, so the crossover where drafting stops paying is learned from
traffic,
not fixed: a GPU's lies at a far larger batch than a CPU's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.drafting.least_squares import RecursiveLeastSquares, Vector
from app.vocabulary import Route


@dataclass(frozen=True)
class Load:
    """Sequences in flight, per engine (time-averaged over a request's life, or right now)."""

    plain: float = 0.0
    speculative: float = 0.0

    @property
    def total(self) -> float:
        return self.plain + self.speculative

    def plus(self, route: Route, sequences: float = 1.0) -> Load:
        if route == "plain":
            return Load(self.plain + sequences, self.speculative)
        return Load(self.plain, self.speculative + sequences)

    def features(self) -> Vector:
        return [1.0, self.plain, self.speculative]


@dataclass(frozen=True)
class LinePrior:
    """A starting line for one route: ms per token alone, plus ms per other sequence."""

    base_ms: float
    per_plain_ms: float
    per_speculative_ms: float


# Measured on the 2-core CPU specgate is developed on (the routing benchmark of
# 2026-12-02, fp32, eager, ngram K=5; mean ITL over all classes): alone, 30 ms per token
# plain and 27 speculative; at 8 in flight on the same engine, 61 and 81. With the engines
# on cores of their own (the default on CPUs, app/engine/vllm/cpu_cores.py), a sequence on one
# engine barely slows the other: only their schedulers and the gateway share cores.
# Traffic replaces these within tens of requests (the prior weighs as PRIOR_WEIGHT
# observations).
CPU_PRIORS: dict[Route, LinePrior] = {
    "plain": LinePrior(30.0, 4.4, 1.0),
    "speculative": LinePrior(27.0, 1.0, 7.7),
}
PRIOR_WEIGHT = 4.0
# Older observations fade: a weight of FORGETTING per newer one (about 100 remembered).
FORGETTING = 0.99


class LoadLine:
    """Recursive least squares over (1, plain in flight, speculative in flight) -> ms/token."""

    def __init__(self, prior: LinePrior, prior_weight: float = PRIOR_WEIGHT) -> None:
        self._fit = RecursiveLeastSquares(
            (prior.base_ms, prior.per_plain_ms, prior.per_speculative_ms), prior_weight, FORGETTING
        )

    @property
    def theta(self) -> list[float]:
        return self._fit.theta

    @property
    def samples(self) -> int:
        return self._fit.samples

    def predict(self, load: Load) -> float:
        # A token never takes less than a small share of a lone one, however the fit drifts.
        floor = 0.1 * max(self.theta[0], 1e-3)
        return max(floor, self._fit.predict(load.features()))

    def observe(self, load: Load, ms: float, weight: float = 1.0) -> None:
        self._fit.observe(load.features(), ms, weight)

    def snapshot(self) -> dict[str, float | int]:
        base, per_plain, per_speculative = self.theta
        return {
            "base_ms": round(base, 3),
            "per_plain_sequence_ms": round(per_plain, 3),
            "per_speculative_sequence_ms": round(per_speculative, 3),
            "samples": self.samples,
        }


class LoadModel:
    def __init__(self, priors: Mapping[Route, LinePrior] | None = None) -> None:
        priors = CPU_PRIORS if priors is None else priors
        self.routes: dict[Route, LoadLine] = {
            route: LoadLine(prior) for route, prior in priors.items()
        }

    def ms_per_token(self, route: Route, others: Load) -> float:
        """Predicted ms per token for one sequence on `route`, beside `others` in flight."""
        return self.routes[route].predict(others)

    def slope(self, on: Route, added: Route) -> float:
        """How much one more sequence on `added` slows each token of a sequence on `on`."""
        theta = self.routes[on].theta
        return max(0.0, theta[1] if added == "plain" else theta[2])

    def observe(self, route: Route, others: Load, ms: float, weight: float = 1.0) -> None:
        self.routes[route].observe(others, ms, weight)

    def snapshot(self) -> dict[str, dict[str, float | int]]:
        return {route: model.snapshot() for route, model in self.routes.items()}
