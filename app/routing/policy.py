"""The routing decision for one request.

In order: the client's X-Speculative header, fields a route's engine cannot serve,
an operator's pinned classes, a temperature ceiling, an optional load ceiling, the class's
rolling acceptance, and finally the expected cost of each route under the load in flight:
the new request's own time, plus what it adds to the requests already running (goodput,
not acceptance alone). A small share of `auto` traffic explores the other engine so that a
class routed badly can recover.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from app.routing.classify import WorkloadClass, classify
from app.routing.features import RequestFeatures
from app.routing.learner import Learner
from app.routing.load_model import Load
from app.vocabulary import ROUTES, Refusal, Route, other_route

Preference = Literal["on", "off", "auto"]
# Low-cardinality names of why a route was chosen, for metrics.
Basis = Literal[
    "header",
    "unsupported",
    "pinned",
    "temperature",
    "load",
    "acceptance",
    "learned",
    "adaptive",
    "prediction",
    "explore",
    "fallback",
]
# A move must promise the rest of a request this much faster, its prefill paid.
MOVE_MARGIN = 1.25
# Acceptance must have been seen this often before it can veto speculation.
MIN_ACCEPTANCE_SAMPLES = 3
# A request's own drafting yield counts as this many steps of its class's typical yield:
# answers often start fresh and copy later (bench.load_phases on 2026-12-03, kept in
# `git log -- bench/results/load_phases`: moves judged on 8 steps at 1.0 tokens per step sent
# structured answers plain that went on to draft well).
CLASS_YIELD_WEIGHT_STEPS = 16


@dataclass(frozen=True)
class RoutingRules:
    pins: Mapping[WorkloadClass, Route] = field(default_factory=dict)
    exploration: float = 0.0
    max_speculative_temperature: float | None = None
    max_speculative_load: int | None = None
    min_acceptance: float = 0.0


@dataclass(frozen=True)
class RunningWork:
    """A sequence already in flight: where it runs and the tokens it is expected to have left."""

    route: Route
    remaining_tokens: float


@dataclass(frozen=True)
class RouteCost:
    """Expected milliseconds a route costs: the request's own, and what it adds to others."""

    own_ms: float
    added_ms: float

    @property
    def total_ms(self) -> float:
        return self.own_ms + self.added_ms


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    workload_class: WorkloadClass
    basis: Basis
    reason: str
    expected_speedup: float | None = None
    # Sequences in flight when the decision was made.
    load: Load = field(default_factory=Load)
    # The most draft tokens per step the client allowed (None: the engine's K).
    draft_length: int | None = None
    # Set when the engine chooses the draft length per step (basis "adaptive"): the
    # per-position acceptance its class is expected to have.
    acceptance_prior: float | None = None


@dataclass(frozen=True)
class NoRoute:
    """No route serves the request as asked; the API layer says so (api/speculative_header.py)."""

    # The route asked for (plain when neither route serves the request).
    route: Route
    refusal: Refusal
    # The other route serves it: the client could leave the choice to the policy.
    other_serves: bool


class Unroutable(Exception):
    """Raised with the policy's NoRoute by whoever acts on its decision (the dispatcher)."""

    def __init__(self, no_route: NoRoute) -> None:
        super().__init__(f"no route serves {no_route.refusal.names}")
        self.no_route = no_route


@dataclass(frozen=True)
class DraftLengths:
    """What the speculative route takes of a client's draft length."""

    # An embedded speculative engine takes a draft length per request; a remote pool does not.
    per_request: bool = False
    # Its K: the longest draft a client may ask for (None: not known here).
    most: int | None = None


@dataclass(frozen=True)
class ClientChoice:
    """What the X-Speculative header asks: a route preference, and optionally a draft length."""

    preference: Preference = "auto"
    draft_length: int | None = None


class RoutePolicy:
    """`adaptive`: one engine serves both routes and chooses each request's draft length at
    every step (app/drafting/length_rule.py); `auto` requests then go to it with their class's
    acceptance prior instead of being priced per route here."""

    def __init__(
        self,
        rules: RoutingRules,
        learner: Learner,
        rng: random.Random | None = None,
        adaptive: bool = False,
    ) -> None:
        self.rules = rules
        self.learner = learner
        self._rng = rng or random.Random()
        self.adaptive = adaptive

    def decide(
        self,
        preference: Preference,
        features: RequestFeatures,
        load: Load | None = None,
        refusals: Mapping[Route, Refusal] | None = None,
        running: tuple[RunningWork, ...] = (),
    ) -> RouteDecision | NoRoute:
        """`refusals`: per route, the request's fields that route's engine cannot serve."""
        workload = classify(features)
        load = load or Load()
        refusals = refusals or {}
        if preference != "auto":
            route: Route = "speculative" if preference == "on" else "plain"
            if route in refusals:
                return NoRoute(route, refusals[route], other_route(route) not in refusals)
            return RouteDecision(route, workload, "header", f"header: X-Speculative {preference}")
        if refusals:
            open_routes = [route for route in ROUTES if route not in refusals]
            if not open_routes:
                return NoRoute("plain", refusals["plain"], other_serves=False)
            refused = refusals[other_route(open_routes[0])]
            return RouteDecision(
                open_routes[0], workload, "unsupported", f"{refused.names}: {refused.why}"
            )
        pinned = self.rules.pins.get(workload)
        if pinned is not None:
            return RouteDecision(pinned, workload, "pinned", f"pinned: {workload} -> {pinned}")
        if features.predicted:
            # The client knows the answer's text. In one engine the rule prices each step's
            # drafts from it by what they land (so a wrong prediction costs little), as it
            # prices the class's other drafts from its prior.
            prior = self.learner.acceptance_prior(workload) if self.adaptive else None
            return RouteDecision(
                "speculative",
                workload,
                "prediction",
                "prediction: the client predicted the answer",
                acceptance_prior=prior,
            )
        decision = replace(self._measured(workload, features, load, running), load=load)
        # The adaptive engine explores by itself: drafts it leaves out are still checked.
        explore = self.rules.exploration and decision.basis != "adaptive"
        if explore and self._rng.random() < self.rules.exploration:
            other = other_route(decision.route)
            return RouteDecision(
                other, workload, "explore", f"explore: trying {other} for {workload}"
            )
        return decision

    def _measured(
        self,
        workload: WorkloadClass,
        features: RequestFeatures,
        load: Load,
        running: tuple[RunningWork, ...],
    ) -> RouteDecision:
        rules = self.rules
        ceiling = rules.max_speculative_temperature
        if ceiling is not None and features.temperature > ceiling:
            return RouteDecision(
                "plain", workload, "temperature", f"temperature {features.temperature} > {ceiling}"
            )
        if rules.max_speculative_load is not None and load.total >= rules.max_speculative_load:
            return RouteDecision(
                "plain",
                workload,
                "load",
                f"load: {load.total:g} requests in flight",
            )
        acceptance = self.learner.acceptance(workload)
        # In one engine a class's low acceptance is priced by the engine's rule, request by
        # request and step by step; a veto would only stop its requests from showing otherwise.
        if (
            not self.adaptive
            and acceptance.value is not None
            and acceptance.samples >= MIN_ACCEPTANCE_SAMPLES
            and acceptance.value < rules.min_acceptance
        ):
            return RouteDecision(
                "plain",
                workload,
                "acceptance",
                f"acceptance {acceptance.value:.2f} < {rules.min_acceptance} for {workload}",
            )
        if self.adaptive:
            prior = self.learner.acceptance_prior(workload)
            return RouteDecision(
                "speculative",
                workload,
                "adaptive",
                f"adaptive: the engine chooses each step's draft length for {workload}, "
                f"from an acceptance of {prior:.2f} per draft token",
                acceptance_prior=prior,
            )
        costs = {
            route: self.cost(route, workload, features.max_tokens, load, running)
            for route in ("speculative", "plain")
        }
        speculative, plain = costs["speculative"], costs["plain"]
        route: Route = "speculative" if speculative.total_ms < plain.total_ms else "plain"
        speedup = plain.own_ms / speculative.own_ms if speculative.own_ms > 0 else None
        shown = "unknown" if speedup is None else f"{speedup:.2f}x"
        return RouteDecision(
            route,
            workload,
            "learned",
            f"expected speed-up {shown} for {workload} at {load.total:g} in flight; "
            f"cost {speculative.total_ms / 1000:.2f} s speculative, "
            f"{plain.total_ms / 1000:.2f} s plain",
            speedup,
        )

    def cost(
        self,
        route: Route,
        workload: WorkloadClass,
        max_tokens: int | None,
        load: Load,
        running: tuple[RunningWork, ...],
        drafting_now: float | None = None,
        drafting_steps: int = 0,
    ) -> RouteCost:
        """What sending a new request of `workload` to `route` is expected to cost.

        `drafting_now` is the request's own tokens per speculative step over its last
        `drafting_steps` replayed steps: it moves the class's typical yield toward its own,
        in proportion to the evidence.
        """
        learner = self.learner
        tokens = learner.expected_output_tokens(workload, max_tokens)
        per_token = learner.ms_per_token(workload, route, load)
        typical = learner.classes[workload].tokens_per_step
        if route == "speculative" and drafting_now is not None and typical.samples:
            usual = learner.tokens_per_step(workload, route)
            own = max(1.0, drafting_now)
            steps = max(0, drafting_steps)
            expected = (CLASS_YIELD_WEIGHT_STEPS * usual + steps * own) / (
                CLASS_YIELD_WEIGHT_STEPS + steps
            )
            per_token *= usual / expected
        own = tokens * per_token
        # Each running sequence's tokens come slower while the new one shares the device.
        added = sum(
            learner.load_model.slope(work.route, route) * min(work.remaining_tokens, tokens)
            for work in running
        )
        return RouteCost(own, added)


MoveCause = Literal["drafting", "load", "forced"]


@dataclass(frozen=True)
class MoveProposal:
    route: Route
    # "drafting" when the request's own drafting would justify the move on an idle device,
    # "load" when only the work in flight does, "forced" when the client asked for it.
    cause: MoveCause
    reason: str


def propose_move(
    policy: RoutePolicy,
    current: Route,
    workload: WorkloadClass,
    remaining_tokens: int,
    context_tokens: int,
    load: Load,
    running: tuple[RunningWork, ...],
    drafting_now: float | None,
    drafting_steps: int = 0,
) -> MoveProposal | None:
    """Move a streaming request when the rest is clearly cheaper on the other route.

    The other route must win by MOVE_MARGIN after paying to read the whole context again
    (its prefill), so that an estimate's noise never makes a request flap.
    """
    other = other_route(current)
    drafting = (drafting_now, drafting_steps)
    stay = policy.cost(current, workload, remaining_tokens, load, running, *drafting)
    go = policy.cost(other, workload, remaining_tokens, load, running, *drafting)
    move_ms = context_tokens * (policy.learner.prefill_ms_per_token[other].value or 0.0)
    if go.total_ms * MOVE_MARGIN + move_ms >= stay.total_ms:
        return None
    alone_stay = policy.cost(current, workload, remaining_tokens, Load(), (), *drafting)
    alone_go = policy.cost(other, workload, remaining_tokens, Load(), (), *drafting)
    alone = alone_go.total_ms * MOVE_MARGIN + move_ms < alone_stay.total_ms
    shown = "unknown" if drafting_now is None else f"{drafting_now:.2f}"
    return MoveProposal(
        other,
        "drafting" if alone else "load",
        f"{current} -> {other}: {stay.total_ms / 1000:.2f} s to stay, "
        f"{(go.total_ms + move_ms) / 1000:.2f} s to move, at {load.total:g} in flight, "
        f"{shown} tokens per draft step",
    )
