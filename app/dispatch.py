"""The request path's one decision point: check the limits, decide the route, admit, start.

`Dispatcher.open` turns an endpoint's `RequestSpec` into a started `Run`. Each run gets a
`Ticket`, its listener, which gives back what the run held (admission slot, load) and passes
its report on to the metrics and the learner. A run that may move gets a `MoveAdvisor`, which
prices each checkpoint with the routing policy. None of them reaches into another's state.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.admission import Admission
from app.engine.generation import GenerationRequest, Prompt, SamplingOptions
from app.engine.protocol import Engine, for_route, route_draft_length
from app.engine.refusals import combined, prediction_refusal
from app.errors import EngineUnavailableError, InvalidRequestError, QueueTimeoutError, SpecgateError
from app.fanout import generate_all
from app.in_flight import InFlight, LoadMark
from app.metrics import GatewayMetrics
from app.request_run import ID_PREFIXES, Endpoint, Run
from app.request_spec import RequestSpec
from app.routing.classify import WorkloadClass
from app.routing.draft_replay import NgramConfig
from app.routing.features import RequestFeatures, extract_features
from app.routing.feedback import Feedback, RunReport
from app.routing.policy import (
    ClientChoice,
    MoveProposal,
    NoRoute,
    RouteDecision,
    RoutePolicy,
    RunningWork,
    Unroutable,
    propose_move,
)
from app.served import ServedModel
from app.switching import MoveContext, Mover, not_movable
from app.tenants.access import Access
from app.tenants.books import TenantBooks, TenantCharge, UsageFigures
from app.vocabulary import Refusal, Route, other_route

logger = logging.getLogger("specgate.requests")


@dataclass(frozen=True)
class Limits:
    # What an absent max_tokens means, and the most a request may ask for (None: no limit).
    max_tokens_default: int | None = None
    max_tokens_limit: int | None = None
    # Stop strings and sequences (prompts x n) one request may hold.
    max_stop_sequences: int = 16
    max_sequences_per_request: int = 192


@dataclass
class Dispatcher:
    model: ServedModel
    engines: Mapping[Route, Engine]
    admissions: Mapping[Route, Admission]
    policy: RoutePolicy
    metrics: GatewayMetrics
    limits: Limits = field(default_factory=Limits)
    # The speculative engine's ngram settings, for the draft replay (None: not ngram).
    ngram: NgramConfig | None = None
    # Let auto-routed requests move between engines mid-stream.
    mid_stream: bool = False
    # Log prompts and outputs (off by default: they are the users' data).
    log_requests: bool = False
    in_flight: InFlight = field(default_factory=InFlight)
    running: RunningBook = field(default_factory=lambda: RunningBook())
    # Each key's limits, share of the engines (shared with the admissions) and usage.
    tenants: TenantBooks = field(default_factory=TenantBooks)

    def __post_init__(self) -> None:
        self.feedback = Feedback(self.policy.learner)
        # One device serves every route: one set of fair-share counters for all their queues.
        for admission in self.admissions.values():
            admission.fair_share = self.tenants.fair_share

    async def open(self, spec: RequestSpec) -> Run:
        """Decide the route, admit and start the request; returns once its first output is in."""
        self.model.check(spec.model)
        options = self._bounded(spec)
        access = spec.access or Access()
        try:
            charge = self.tenants.open(access, spec.prompts, options)
        except SpecgateError as exc:
            self.metrics.key_refusals.labels(key=access.tenant, code=exc.code or "").inc()
            raise
        try:
            return await self._open(spec, options, charge)
        except BaseException:
            self.tenants.never_ran(charge)  # nothing if its run started and ended
            raise

    async def _open(self, spec: RequestSpec, options: SamplingOptions, charge: TenantCharge) -> Run:
        features = extract_features(
            spec.routing_text,
            # Tool calls are JSON, whether constrained or written in the model's own format.
            wants_json=options.json_schema is not None or bool(spec.tools),
            temperature=options.temperature,
            top_p=options.top_p,
            max_tokens=options.max_tokens,
            predicted=spec.prediction is not None,
        )
        decision = self.decide(spec.choice, features, options)
        request_id = f"{ID_PREFIXES[spec.endpoint]}{uuid.uuid4().hex}"
        return await self.start(
            decision,
            request_id,
            spec.prompts,
            options,
            spec.endpoint,
            spec.move_after,
            spec.tools,
            spec.tenant,
            spec.prediction,
            charge,
        )

    def decide(
        self,
        choice: ClientChoice,
        features: RequestFeatures,
        options: SamplingOptions | None = None,
    ) -> RouteDecision:
        """The route; raises Unroutable when no route serves the request as asked."""
        refusals = self._refusals(options, features.predicted)
        # Both routes share one device, so every sequence in flight on either is load on
        # both: the policy weighs a new request against what is running.
        decision = self.policy.decide(
            choice.preference, features, self.in_flight.now(), refusals, self.running.work()
        )
        if isinstance(decision, NoRoute):
            raise Unroutable(decision)
        decision = self._around_dead_engine(decision, refusals)
        if decision.route == "speculative" and choice.draft_length is not None:
            decision = replace(decision, draft_length=choice.draft_length)
        self.metrics.record_decision(decision)
        return decision

    async def start(
        self,
        decision: RouteDecision,
        request_id: str,
        prompts: list[Prompt],
        options: SamplingOptions,
        endpoint: Endpoint,
        move_after: int | None = None,
        tools: tuple[dict[str, Any], ...] | None = None,
        tenant: str | None = None,
        prediction: str | None = None,
        charge: TenantCharge | None = None,
    ) -> Run:
        """Submit one engine request per prompt; returns once the first output is in."""
        route = decision.route
        engine = self.engines.get(route)
        if engine is None or not engine.is_alive():
            raise EngineUnavailableError(f"the {route} engine is not running")
        admission = self.admissions[route]
        charge = charge or self.tenants.open(Access(), prompts, options)
        try:
            await admission.enter(charge.access.tenant)
        except SpecgateError as exc:
            reason = "queue_timeout" if isinstance(exc, QueueTimeoutError) else "at_capacity"
            self.metrics.rejected.labels(route=route, reason=reason).inc()
            if exc.status_code == 429:
                self.metrics.key_refusals.labels(key=charge.access.tenant, code=reason).inc()
                self.tenants.refused(charge.access, exc.code or reason)
            raise
        self.tenants.admitted(charge)
        requests = [
            GenerationRequest(
                request_id if len(prompts) == 1 else f"{request_id}-{i}",
                prompt,
                options,
                decision.draft_length,
                decision.acceptance_prior,
                tools,
                tenant,
                decision.workload_class.value,
                prediction,
                charge.access.key.name if charge.access.key is not None else None,
                charge.access.weight,
            )
            for i, prompt in enumerate(prompts)
        ]
        if self.log_requests:
            logger.info("request %s to %s: prompts %r", request_id, route, prompts)
        self.metrics.in_flight.labels(route=route).inc()
        sequences = len(prompts) * options.n
        expected = self.policy.learner.expected_output_tokens(
            decision.workload_class, options.max_tokens
        )
        ticket = Ticket(
            request_id,
            sequences,
            admission,
            self.in_flight,
            self.in_flight.add(route, sequences),
            self.running,
            self.metrics,
            self.feedback,
            self.tenants,
            charge,
            self.log_requests,
        )
        mover = self._mover(decision, requests, expected, move_after)
        if mover is not None:
            steps = mover.steps()
        else:
            steps = generate_all(engine, [for_route(r, route, engine.facts) for r in requests])
        ngram = self.ngram if sequences == 1 else None
        run = await Run.start(steps, decision, endpoint, ticket, request_id, ngram, mover)
        self.running.add(request_id, run, expected * sequences)
        return run

    def _bounded(self, spec: RequestSpec) -> SamplingOptions:
        """The options with the server's max_tokens default, after the limits are checked."""
        limits = self.limits
        stops = len(spec.options.stop)
        if stops > limits.max_stop_sequences:
            raise InvalidRequestError(
                f"stop holds {stops} strings; this server takes at most "
                f"{limits.max_stop_sequences} (--max-stop-sequences)",
                param="stop",
                code="too_many_stop_sequences",
            )
        sequences = len(spec.prompts) * spec.options.n
        if sequences > limits.max_sequences_per_request:
            raise InvalidRequestError(
                f"the request holds {sequences} sequences ({len(spec.prompts)} prompts x n "
                f"{spec.options.n}); this server takes at most "
                f"{limits.max_sequences_per_request} per request (--max-prompts-per-request, "
                "bounded by --max-running-requests + --max-queued-requests)",
                param="prompt" if len(spec.prompts) > 1 else "n",
                code="too_many_sequences",
            )
        asked, limit = spec.options.max_tokens, limits.max_tokens_limit
        if limit is not None and asked is not None and asked > limit:
            raise InvalidRequestError(
                f"{spec.max_tokens_field} is {asked}; this server generates at most "
                f"{limit} tokens per request (--max-tokens-limit)",
                param=spec.max_tokens_field,
                code="max_tokens_over_limit",
            )
        return replace(spec.options, default_max_tokens=limits.max_tokens_default)

    def _refusals(self, options: SamplingOptions | None, predicted: bool) -> dict[Route, Refusal]:
        """Per route, what its engine cannot serve of this request (routes that can: absent)."""
        refusals: dict[Route, Refusal] = {}
        for route, engine in self.engines.items():
            draft_length = route_draft_length(route, engine.facts)
            refusal = combined(
                engine.servable(options, draft_length) if options is not None else None,
                prediction_refusal(predicted, engine.facts.takes_prediction),
            )
            if refusal is not None:
                refusals[route] = refusal
        return refusals

    def _around_dead_engine(
        self, decision: RouteDecision, refusals: Mapping[Route, Refusal]
    ) -> RouteDecision:
        """Fallback policy: a request the client did not pin goes to the surviving engine."""
        chosen = self.engines.get(decision.route)
        if decision.basis == "header" or (chosen is not None and chosen.is_alive()):
            return decision
        other = other_route(decision.route)
        survivor = self.engines.get(other)
        if survivor is None or not survivor.is_alive() or other in refusals:
            return decision  # nothing better; starting it will answer 503
        return replace(
            decision,
            route=other,
            basis="fallback",
            reason=f"fallback: the {decision.route} engine is down",
        )

    def _mover(
        self,
        decision: RouteDecision,
        requests: list[GenerationRequest],
        expected: float,
        move_after: int | None,
    ) -> Mover | None:
        """A mover for a request that may change engines mid-stream, or None."""
        # A request with a prediction stays where it drafts from it (a continuation elsewhere
        # would re-check the prediction against a longer prompt).
        if not self.mid_stream or self.ngram is None or len(requests) != 1:
            return None
        if requests[0].prediction is not None:
            return None
        if self.policy.adaptive and move_after is None:
            return None  # one engine re-chooses the length every step: nothing to move for
        request = requests[0]
        other = self.engines.get(other_route(decision.route))
        forced = move_after is not None
        if (
            other is None
            or not other.is_alive()
            or not_movable(request, decision.basis, self.ngram, forced=forced)
        ):
            return None
        advisor = MoveAdvisor(
            request.request_id,
            decision.workload_class,
            self.policy,
            self.in_flight,
            self.running,
            self.metrics,
        )
        return Mover(
            self.engines,
            request,
            decision.route,
            decision.reason,
            self.ngram,
            advisor,
            expected,
            move_after,
        )


class RunningBook:
    """The runs streaming now, with the output each is expected to produce in all."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[Run, float]] = {}

    def add(self, request_id: str, run: Run, expected_tokens: float) -> None:
        self._runs[request_id] = (run, expected_tokens)

    def remove(self, request_id: str) -> None:
        self._runs.pop(request_id, None)

    def work(self, exclude: str | None = None) -> tuple[RunningWork, ...]:
        """Each run's route and the tokens it is expected to have left."""
        return tuple(
            RunningWork(run.route, max(0.0, expected - run.completion_tokens))
            for request_id, (run, expected) in self._runs.items()
            if request_id != exclude
        )


@dataclass
class Ticket:
    """A started run's listener: gives back what it held, and reports it."""

    request_id: str
    sequences: int
    admission: Admission
    in_flight: InFlight
    # The load when it started, for the load it ran beside.
    mark: LoadMark
    running: RunningBook
    metrics: GatewayMetrics
    feedback: Feedback
    tenants: TenantBooks
    charge: TenantCharge
    log_requests: bool = False

    def run_completed(self, report: RunReport) -> None:
        self.tenants.completed(self.charge, usage_figures(report))

    def run_finished(self, report: RunReport) -> None:
        # The tenant's books first: the freed slot goes to whoever is served least by then.
        self.tenants.finished(self.charge, usage_figures(report))
        self.metrics.record_key_usage(self.charge.access.tenant, report)
        self.admission.leave()
        self.running.remove(self.request_id)
        route = report.route
        others = self.in_flight.average_since(self.mark).plus(route, -self.sequences)
        self.in_flight.remove(route, self.sequences)
        self.metrics.record_run(report)
        if self.log_requests:
            logger.info(
                "request %s %s: outputs %r", report.request_id, report.outcome, report.outputs
            )
        self.feedback.learn(report, others)


def usage_figures(report: RunReport) -> UsageFigures:
    return UsageFigures(
        report.request_id,
        report.outcome,
        report.prompt_tokens,
        report.completion_tokens,
        report.draft_stats,
    )


@dataclass
class MoveAdvisor:
    """Prices a moving request's checkpoints with the routing policy, beside the work running."""

    request_id: str
    workload: WorkloadClass
    policy: RoutePolicy
    in_flight: InFlight
    running: RunningBook
    metrics: GatewayMetrics

    def propose(self, context: MoveContext) -> MoveProposal | None:
        return propose_move(
            self.policy,
            context.route,
            self.workload,
            context.remaining_tokens,
            context.context_tokens,
            self.in_flight.now().plus(context.route, -1),
            self.running.work(exclude=self.request_id),
            context.drafting_now,
            context.drafting_steps,
        )

    def moved(self, source: Route, target: Route, proposal: MoveProposal) -> None:
        self.in_flight.remove(source, 1)
        self.in_flight.add(target, 1)
        self.metrics.in_flight.labels(route=source).dec()
        self.metrics.in_flight.labels(route=target).inc()
        self.metrics.switches.labels(direction=f"{source}_to_{target}", cause=proposal.cause).inc()
