"""What the gateway has measured: per route, milliseconds per token under load; per
workload class, how its tokens compare with that line, and what drafting yields it.

A route's milliseconds per output token, for a class at a load, is

    class_factor[route, class] * ms_per_token[route](load)

The line comes from the load model (app/routing/load_model.py), shared by all classes, so
what one class teaches about load serves every class. The factor holds what makes a class
cheaper or dearer than the line: on the speculative route, chiefly how many drafts land.
Tokens per speculative step (from the speculative engine's figures and, for requests the
plain engine served, from the draft replay) are kept beside it, to say how much engine
work a running request has left.

Estimates start from priors measured on a CPU like the ones specgate is developed on
(the routing benchmark of 2026-12-02 at concurrency 1, since retired: bench/RESULTS.md, "Routing
benchmark") and move toward what this server observes. They live in
memory only: a restart goes back to the priors (see docs/routing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.routing.classify import WorkloadClass
from app.routing.load_model import Load, LoadModel
from app.vocabulary import Route, SpecDecodeStats

# Each class's speculative ITL at concurrency 1 over the speculative line's (27 ms), from
# the routing benchmark of 2026-12-02 (since retired); the plain route's classes all ran at
# the line's 30 ms there.
CPU_SPECULATIVE_FACTORS: dict[WorkloadClass, float] = {
    WorkloadClass.STRUCTURED: 0.85,
    WorkloadClass.CODE_EDIT: 0.93,
    WorkloadClass.REWRITE: 0.81,
    WorkloadClass.CODE: 0.93,
    WorkloadClass.OPEN_ENDED: 1.22,
}
# Each class's per-position draft acceptance before it has been seen (ngram K=5, a step that
# has a proposal): accepted / (accepted + drafts) of the draft replays of the
# tune split's answers in the changing-load replay (bench.load_phases --split tune, 152
# answers, 2026-12-05). Prompts of the report split were not used. Traffic replaces them.
PRIOR_POSITION_ACCEPTANCE: dict[WorkloadClass, float] = {
    WorkloadClass.STRUCTURED: 0.68,
    WorkloadClass.CODE_EDIT: 0.7,
    WorkloadClass.REWRITE: 0.67,
    WorkloadClass.CODE: 0.5,
    # Not in that replay: a guess, between fresh code and prose.
    WorkloadClass.FRESH_JSON: 0.4,
    # Poems rarely get a proposal at all; when they do it is a repeat that often lands.
    WorkloadClass.OPEN_ENDED: 0.6,
}
# What an absent max_tokens is expected to produce, before any request of the class finished.
PRIOR_OUTPUT_TOKENS = 128.0
# Time to first token per prompt token (the routing benchmark of 2026-12-02: about 100 ms
# for 100-200 tokens).
PRIOR_PREFILL_MS_PER_TOKEN = 0.8


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
    factor: dict[Route, Average]
    tokens_per_step: Average  # on the speculative route, the bonus token included
    acceptance_rate: Average
    # Per draft position: accepted / (accepted + drafts), the chance each next draft token
    # lands (a draft ends at its first miss; counted as one, it errs low when drafts land whole).
    position_acceptance: Average
    output_tokens: Average
    # ms per output token as served, whatever the load: for people reading /v1/routing.
    latency: dict[Route, Average]


@dataclass(frozen=True)
class Observation:
    """One finished request's figures, per sequence."""

    workload: WorkloadClass
    route: Route
    others: Load  # the other sequences in flight, averaged over the request's life
    ms_per_token: float  # after the first token
    tokens_per_step: float
    output_tokens: int


class Learner:
    def __init__(
        self,
        alpha: float = 0.2,
        speculative_factors: dict[WorkloadClass, float] | None = None,
        load_model: LoadModel | None = None,
    ) -> None:
        priors = CPU_SPECULATIVE_FACTORS if speculative_factors is None else speculative_factors
        self.load_model = load_model or LoadModel()
        # What re-reading a context costs a route: the price of moving a request there.
        self.prefill_ms_per_token: dict[Route, Average] = {
            route: Average(PRIOR_PREFILL_MS_PER_TOKEN, alpha) for route in ("plain", "speculative")
        }
        self.classes: dict[WorkloadClass, ClassEstimates] = {
            workload: ClassEstimates(
                factor={
                    "plain": Average(1.0, alpha),
                    "speculative": Average(priors.get(workload, 1.0), alpha),
                },
                tokens_per_step=Average(None, alpha),
                acceptance_rate=Average(None, alpha),
                position_acceptance=Average(PRIOR_POSITION_ACCEPTANCE.get(workload, 0.3), alpha),
                output_tokens=Average(PRIOR_OUTPUT_TOKENS, alpha),
                latency={"plain": Average(None, alpha), "speculative": Average(None, alpha)},
            )
            for workload in WorkloadClass
        }

    def ms_per_token(self, workload: WorkloadClass, route: Route, others: Load) -> float:
        """Expected ms per output token for a new sequence of `workload` on `route`."""
        factor = self.classes[workload].factor[route].value or 1.0
        return factor * self.load_model.ms_per_token(route, others)

    def tokens_per_step(self, workload: WorkloadClass, route: Route) -> float:
        if route == "plain":
            return 1.0
        return max(1.0, self.classes[workload].tokens_per_step.value or 1.0)

    def expected_output_tokens(self, workload: WorkloadClass, max_tokens: int | None) -> float:
        typical = self.classes[workload].output_tokens.value or PRIOR_OUTPUT_TOKENS
        return typical if max_tokens is None else min(float(max_tokens), typical)

    def observe(self, observation: Observation) -> None:
        estimates = self.classes[observation.workload]
        route, others = observation.route, observation.others
        factor = estimates.factor[route]
        line = self.load_model.ms_per_token(route, others)
        # The line learns with this class's offset taken out; the class learns its offset
        # against the line.
        self.load_model.observe(route, others, observation.ms_per_token / (factor.value or 1.0))
        factor.observe(observation.ms_per_token / line)
        if route == "speculative":
            estimates.tokens_per_step.observe(observation.tokens_per_step)
        estimates.output_tokens.observe(observation.output_tokens)
        estimates.latency[route].observe(observation.ms_per_token)

    def observe_prefill(self, route: Route, prompt_tokens: int, seconds: float) -> None:
        if prompt_tokens > 0:
            self.prefill_ms_per_token[route].observe(seconds * 1000 / prompt_tokens)

    def observe_replay(self, workload: WorkloadClass, tokens_per_step: float) -> None:
        """What drafting would have yielded a request the plain engine served."""
        self.classes[workload].tokens_per_step.observe(tokens_per_step)

    def observe_acceptance(self, workload: WorkloadClass, stats: SpecDecodeStats) -> None:
        if stats.draft_tokens == 0:
            return  # nothing was drafted: no evidence either way
        estimates = self.classes[workload]
        estimates.acceptance_rate.observe(stats.acceptance_rate)
        estimates.position_acceptance.observe(
            stats.accepted_tokens / (stats.accepted_tokens + stats.drafts)
        )

    def acceptance_prior(self, workload: WorkloadClass) -> float:
        """The per-position acceptance a new request of `workload` is expected to have."""
        value = self.classes[workload].position_acceptance.value
        return round(min(max(value if value is not None else 0.3, 0.0), 0.95), 4)

    def acceptance(self, workload: WorkloadClass) -> Average:
        return self.classes[workload].acceptance_rate

    def speedup_alone(self, workload: WorkloadClass) -> float:
        """Plain over speculative ms per token, each alone on its engine: the learned speed-up."""
        alone = Load()
        return self.ms_per_token(workload, "plain", alone) / self.ms_per_token(
            workload, "speculative", alone
        )

    def snapshot(self) -> dict[str, dict[str, Any]]:
        alone = Load()
        return {
            workload.value: {
                "plain_ms_per_token_alone": _rounded(self.ms_per_token(workload, "plain", alone)),
                "speculative_ms_per_token_alone": _rounded(
                    self.ms_per_token(workload, "speculative", alone)
                ),
                "expected_speedup": _rounded(self.speedup_alone(workload)),
                "speculative_tokens_per_step": _rounded(estimates.tokens_per_step.value),
                "tokens_per_step_samples": estimates.tokens_per_step.samples,
                "factor": {
                    route: _rounded(average.value) for route, average in estimates.factor.items()
                },
                "observed_ms_per_token": {
                    route: _rounded(average.value) for route, average in estimates.latency.items()
                },
                "plain_samples": estimates.factor["plain"].samples,
                "speculative_samples": estimates.factor["speculative"].samples,
                "acceptance_rate": _rounded(estimates.acceptance_rate.value),
                "acceptance_samples": estimates.acceptance_rate.samples,
                "position_acceptance": _rounded(estimates.position_acceptance.value),
                "mean_output_tokens": _rounded(estimates.output_tokens.value),
            }
            for workload, estimates in self.classes.items()
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
