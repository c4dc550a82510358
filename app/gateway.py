"""The gateway's state for one app: engines, router, learner and metrics, and their wiring."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.admission import Admission
from app.auto_tools import AutoToolChoice
from app.engine.base import Engine
from app.engine.capabilities import Refusal
from app.engine.tokenizing import TokenizerService
from app.engine.types import GenerationRequest, Prompt, Route, SamplingOptions, other_route
from app.errors import (
    EngineUnavailableError,
    InvalidRequestError,
    ModelNotFoundError,
    QueueTimeoutError,
    SpecgateError,
)
from app.fanout import generate_all
from app.generation import ID_PREFIXES, Endpoint, Run
from app.in_flight import InFlight
from app.metrics import GatewayMetrics
from app.request_spec import RequestSpec
from app.response_store import ResponseStore
from app.routing.draft_replay import NgramConfig
from app.routing.features import RequestFeatures, extract_features
from app.routing.learner import Observation
from app.routing.load_model import Load
from app.routing.policy import (
    HEADER,
    MoveProposal,
    RouteDecision,
    RoutePolicy,
    RunningWork,
    parse_header,
    propose_move,
)
from app.switching import MoveContext, Mover, not_movable

logger = logging.getLogger("specgate.requests")


@dataclass
class Gateway:
    model_id: str
    engines: Mapping[Route, Engine]
    admissions: Mapping[Route, Admission]
    metrics: GatewayMetrics
    policy: RoutePolicy
    # On shutdown, how long open streams may go on before they are cut.
    shutdown_grace_seconds: float = 0.0
    # Log prompts and outputs (off by default: they are the users' data).
    log_requests: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    # The speculative engine's ngram settings, for the shadow drafter (None: not ngram).
    ngram: NgramConfig | None = None
    # Let auto-routed requests move between engines mid-stream.
    mid_stream: bool = False
    # What an absent max_tokens means, and the most a request may ask for (None: no limit).
    max_tokens_default: int | None = None
    max_tokens_limit: int | None = None
    # Stop strings and sequences (prompts x n) one request may hold.
    max_stop_sequences: int = 16
    max_sequences_per_request: int = 192
    # The speculative engine's K: the longest draft length a client may ask for.
    max_draft_length: int | None = None
    in_flight: InFlight = field(default_factory=InFlight)
    # How tool_choice "auto" is served; None: refused (--no-enable-auto-tool-choice).
    auto_tools: AutoToolChoice | None = None
    # The served model's tokenizer, for /tokenize and its kin; None: no engine has one.
    tokenizing: TokenizerService | None = None
    # Stored responses of /v1/responses (previous_response_id, GET /v1/responses/{id}).
    responses: ResponseStore = field(default_factory=lambda: ResponseStore(1000))
    # Runs streaming now, with the output they are expected to produce in all.
    _running: dict[Run, float] = field(default_factory=dict)

    async def open(self, spec: RequestSpec) -> Run:
        """Decide the route, admit and start the request; returns once its first output is in."""
        self.check_model(spec.model)
        options = self._bounded(spec)
        features = extract_features(
            spec.routing_text,
            # Tool calls are JSON, whether constrained or written in the model's own format.
            wants_json=options.json_schema is not None or bool(spec.tools),
            temperature=options.temperature,
            top_p=options.top_p,
            max_tokens=options.max_tokens,
        )
        decision = self.decide(spec.route_header, features, options)
        request_id = f"{ID_PREFIXES[spec.endpoint]}{uuid.uuid4().hex}"
        return await self.start(
            decision, request_id, spec.prompts, options, spec.endpoint, spec.move_after, spec.tools
        )

    def _bounded(self, spec: RequestSpec) -> SamplingOptions:
        """The options with the server's max_tokens default, after the limits are checked."""
        stops = len(spec.options.stop)
        if stops > self.max_stop_sequences:
            raise InvalidRequestError(
                f"stop holds {stops} strings; this server takes at most "
                f"{self.max_stop_sequences} (--max-stop-sequences)",
                param="stop",
                code="too_many_stop_sequences",
            )
        sequences = len(spec.prompts) * spec.options.n
        if sequences > self.max_sequences_per_request:
            raise InvalidRequestError(
                f"the request holds {sequences} sequences ({len(spec.prompts)} prompts x n "
                f"{spec.options.n}); this server takes at most {self.max_sequences_per_request} "
                "per request (--max-prompts-per-request, bounded by --max-running-requests + "
                "--max-queued-requests)",
                param="prompt" if len(spec.prompts) > 1 else "n",
                code="too_many_sequences",
            )
        asked, limit = spec.options.max_tokens, self.max_tokens_limit
        if limit is not None and asked is not None and asked > limit:
            raise InvalidRequestError(
                f"{spec.max_tokens_field} is {asked}; this server generates at most "
                f"{limit} tokens per request (--max-tokens-limit)",
                param=spec.max_tokens_field,
                code="max_tokens_over_limit",
            )
        return replace(spec.options, default_max_tokens=self.max_tokens_default)

    def check_model(self, model: str) -> None:
        if model != self.model_id:
            raise ModelNotFoundError(
                f"The model '{model}' does not exist; this server serves '{self.model_id}'.",
                param="model",
            )

    def decide(
        self,
        route_header: str | None,
        features: RequestFeatures,
        options: SamplingOptions | None = None,
    ) -> RouteDecision:
        choice = parse_header(route_header)
        self._check_draft_length(choice.draft_length)
        refusals = self._refusals(options)
        # Both embedded engines share one device, so every sequence in flight on either is
        # load on both: the router weighs a new request against what is running.
        decision = self.policy.decide(
            choice.preference,
            features,
            self.in_flight.now(),
            refusals,
            self._running_work(),
        )
        decision = self._around_dead_engine(decision, refusals)
        if decision.route == "speculative" and choice.draft_length is not None:
            decision = replace(decision, draft_length=choice.draft_length)
        self.metrics.record_decision(decision)
        return decision

    def _check_draft_length(self, length: int | None) -> None:
        if length is None:
            return
        engine = self.engines.get("speculative")
        if engine is None or not engine.facts.per_request_draft_length:
            raise InvalidRequestError(
                f"{HEADER}: a draft length (k=N) needs an embedded speculative engine; "
                "this server's speculative route cannot take one",
                param=HEADER,
                code="unsupported_draft_length",
            )
        if self.max_draft_length is not None and length > self.max_draft_length:
            raise InvalidRequestError(
                f"{HEADER}: k={length} is more than the engine drafts "
                f"(num_speculative_tokens {self.max_draft_length})",
                param=HEADER,
                code="invalid_header",
            )

    def _refusals(self, options: SamplingOptions | None) -> dict[Route, Refusal]:
        """Per route, what its engine cannot serve of this request (routes that can: absent)."""
        if options is None:
            return {}
        return {
            route: refusal
            for route, engine in self.engines.items()
            if (refusal := engine.servable(options)) is not None
        }

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

    async def start(
        self,
        decision: RouteDecision,
        request_id: str,
        prompts: list[Prompt],
        options: SamplingOptions,
        endpoint: Endpoint,
        move_after: int | None = None,
        tools: tuple[dict[str, Any], ...] | None = None,
    ) -> Run:
        """Submit one engine request per prompt; returns once the first output is in."""
        engine = self.engines.get(decision.route)
        if engine is None or not engine.is_alive():
            raise EngineUnavailableError(f"the {decision.route} engine is not running")
        admission = self.admissions[decision.route]
        try:
            await admission.enter()
        except SpecgateError as exc:
            reason = "queue_timeout" if isinstance(exc, QueueTimeoutError) else "at_capacity"
            self.metrics.rejected.labels(route=decision.route, reason=reason).inc()
            raise
        requests = [
            GenerationRequest(
                request_id if len(prompts) == 1 else f"{request_id}-{i}",
                p,
                options,
                decision.draft_length,
                decision.acceptance_prior,
                tools,
            )
            for i, p in enumerate(prompts)
        ]
        if self.log_requests:
            logger.info("request %s to %s: prompts %r", request_id, decision.route, prompts)
        self.metrics.in_flight.labels(route=decision.route).inc()
        sequences = len(prompts) * options.n
        mark = self.in_flight.add(decision.route, sequences)
        expected = self.policy.learner.expected_output_tokens(
            decision.workload_class, options.max_tokens
        )
        mover = self._mover(decision, requests, expected, move_after)
        steps = mover.steps() if mover is not None else generate_all(engine, requests)

        def finished(run: Run) -> None:
            admission.leave()
            self._running.pop(run, None)
            others = self.in_flight.average_since(mark).plus(run.route, -sequences)
            self.in_flight.remove(run.route, sequences)
            self._finished(run, others)

        ngram = self.ngram if sequences == 1 else None
        run = await Run.start(steps, decision, endpoint, finished, request_id, ngram, mover)
        self._running[run] = expected * sequences
        return run

    def _mover(
        self,
        decision: RouteDecision,
        requests: list[GenerationRequest],
        expected: float,
        move_after: int | None,
    ) -> Mover | None:
        """A mover for a request that may change engines mid-stream, or None."""
        if not self.mid_stream or self.ngram is None or len(requests) != 1:
            return None
        if self.policy.adaptive and move_after is None:
            return None  # one engine re-chooses the length every step: nothing to move for
        request = requests[0]
        other = self.engines.get(other_route(decision.route))
        if (
            other is None
            or not other.is_alive()
            or not_movable(request, decision.basis, self.ngram, forced=move_after is not None)
        ):
            return None
        workload = decision.workload_class

        def policy(context: MoveContext) -> MoveProposal | None:
            load = self.in_flight.now().plus(context.route, -1)
            running = self._running_work(exclude=mover)
            return propose_move(
                self.policy,
                context.route,
                workload,
                context.remaining_tokens,
                context.context_tokens,
                load,
                running,
                context.drafting_now,
                context.drafting_steps,
            )

        def moved(source: Route, target: Route, proposal: MoveProposal) -> None:
            self.in_flight.remove(source, 1)
            self.in_flight.add(target, 1)
            self.metrics.in_flight.labels(route=source).dec()
            self.metrics.in_flight.labels(route=target).inc()
            self.metrics.switches.labels(
                direction=f"{source}_to_{target}", cause=proposal.cause
            ).inc()

        mover = Mover(
            self.engines,
            request,
            decision.route,
            decision.reason,
            self.ngram,
            policy,
            moved,
            expected,
            move_after,
        )
        return mover

    def _running_work(self, exclude: Mover | None = None) -> tuple[RunningWork, ...]:
        return tuple(
            RunningWork(run.route, max(0.0, expected - run.completion_tokens))
            for run, expected in self._running.items()
            if exclude is None or run.mover is not exclude
        )

    def _finished(self, run: Run, others: Load) -> None:
        self.metrics.record_run(run)
        if self.log_requests:
            outputs = [choice.text for _, choice in sorted(run.choices.items())]
            logger.info("request %s %s: outputs %r", run.request_id, run.outcome, outputs)
        if run.outcome != "ok":
            return
        # Only finished requests teach the router: an abort says nothing about speed.
        learner = self.policy.learner
        if not run.moved:
            # A moved run's figures mix two routes and a re-read context: no clean sample.
            others = Load(max(0.0, others.plain), max(0.0, others.speculative))
            observation = observe(run, others)
            if observation is not None:
                learner.observe(observation)
            if run.time_to_first_token is not None:
                learner.observe_prefill(run.route, run.prompt_tokens, run.time_to_first_token)
        replay = run.draft_replay
        # An adaptive run drafted what the engine chose to: its class learns from the
        # replay of drafting every step instead, as a plain run's does.
        replayed = run.route == "plain" or run.decision.basis == "adaptive"
        if run.draft_stats is not None and not (replayed and replay is not None):
            learner.observe_acceptance(run.decision.workload_class, run.draft_stats)
        if replayed and not run.moved and replay is not None and replay.steps:
            # What drafting would have yielded, learned without sending the request there.
            learner.observe_replay(
                run.decision.workload_class, replay.recent_tokens_per_step(replay.steps) or 1.0
            )
            learner.observe_acceptance(run.decision.workload_class, replay.stats)


def observe(run: Run, others: Load) -> Observation | None:
    """A finished run's step time and tokens per step, or None when it says nothing.

    Runs of several sequences are left out: their choices may share one engine sequence
    (greedy n > 1 is repeated) and their steps cannot be told apart.
    """
    if len(run.choices) != 1 or run.first_token_at is None or run.finished_at is None:
        return None
    later_tokens = run.completion_tokens - 1  # the first comes from the prompt's prefill
    if later_tokens <= 0:
        return None
    accepted = run.draft_stats.accepted_tokens if run.draft_stats is not None else 0
    # vLLM counts a last draft's accepted tokens before max_tokens or a stop trims the
    # output, so accepted tokens can outnumber the tokens that arrived.
    steps = max(1, later_tokens - accepted)
    decode_ms = (run.finished_at - run.first_token_at) * 1000
    return Observation(
        workload=run.decision.workload_class,
        route=run.decision.route,
        others=others,
        ms_per_token=decode_ms / later_tokens,
        tokens_per_step=later_tokens / steps,
        output_tokens=run.completion_tokens,
    )
