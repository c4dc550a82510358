"""specgate's Ray Serve request router: Ray's types in, app/placement/replica_rank.py's rule, a
ranking out. Nothing here decides anything the rule does not.

Serve asks `choose_replicas` for each request it routes, with the replicas it may use and the
request's arguments (for `generate`, the GenerationRequest). Each replica's report arrives
as `routing_stats` (its `record_routing_stats()`, refreshed every
`request_routing_stats_period_s`), so a burst can arrive between two reports: the router also
counts the requests it has in flight on each replica (Serve tells it when it sends one and
when one completes), and takes the larger of the two. It also keeps a record of the prompt
prefixes it sent to each replica (app/placement/prefix_table.py), from which the rule prices the
prompt tokens a replica would not compute again. Calls other than `generate` (facts,
tokenizer) go to any replica.
"""

from __future__ import annotations

import logging
import random
import time
from collections import deque
from dataclasses import astuple
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from app.drafting.length_rule import CPU_STEP_PRIOR, StepCostPrior
from app.engine.generation import GenerationRequest
from app.placement.in_flight_log import InFlightLog, others_in_flight
from app.placement.prefix_table import PrefixTable, prompt_chunks, prompt_tokens
from app.placement.replica_rank import EXPECTED_OUTPUT_TOKENS, ReplicaReport, Wants, rank
from app.serve_ray.replica import history_key

logger = logging.getLogger("specgate.router")

# The draft length assumed for a request that leaves it to the engine (its K is the
# replica's; specgate's default n-gram K).
DEFAULT_DRAFT = 5
# A first choice not sent within this long was dropped (Serve retried the routing).
CHOICE_LAPSES_S = 2.0
# A replica's own line counts once it has measured this many steps; before, a new replica
# (a restart, a scale-up) would be priced by a prior that is not its device's, and shunned.
LEARNED_AFTER_STEPS = 20


def wants_of(request: GenerationRequest, cached_tokens: dict[str, int] | None = None) -> Wants:
    drafts = request.draft_length != 0
    return Wants(
        drafts=drafts,
        workload_class=request.workload_class,
        prior=request.acceptance_prior,
        history=history_key(request) if drafts else None,
        max_draft=request.draft_length or DEFAULT_DRAFT,
        output_tokens=request.options.max_tokens or EXPECTED_OUTPUT_TOKENS,
        prompt_tokens=prompt_tokens(request.prompt),
        cached_tokens=cached_tokens or {},
    )


def learned_line(stats: dict[str, Any]) -> StepCostPrior | None:
    """A replica's step-cost line, once it has seen enough steps to have one of its own."""
    line = stats.get("step_cost")
    if not line or int(stats.get("step_samples", 0)) < LEARNED_AFTER_STEPS:
        return None
    return StepCostPrior(*line)


def shared_line(lines: list[StepCostPrior]) -> StepCostPrior:
    """The line a replica without one of its own is priced by: its peers' average (replicas
    of one deployment run one engine on like devices), or the CPU prior before any."""
    if not lines:
        return CPU_STEP_PRIOR
    terms = zip(*(astuple(line) for line in lines), strict=True)
    return StepCostPrior(*(sum(term) / len(lines) for term in terms))


def report_of(
    replica_id: str,
    stats: dict[str, Any],
    in_flight: int,
    line: StepCostPrior,
    mine_then: int | None = None,
) -> ReplicaReport:
    """A replica's report from its routing stats (empty before its first), with what this
    router has in flight there. `mine_then`: what this router had there when the report was
    taken; the report then adds only the others' requests to this router's own now (a report
    taken while this router's requests ran says nothing of them once they have ended).
    Without it, this router's requests count past what the report says."""
    waiting = int(stats.get("waiting", 0))
    reported = int(stats.get("running", 0))
    others = others_in_flight(reported + waiting, mine_then)
    if others is None:
        running = max(reported, in_flight - waiting)
    else:
        total = in_flight + others
        waiting = min(waiting, total)
        running = total - waiting
    return ReplicaReport(
        replica_id,
        running=running,
        waiting=waiting,
        step_cost=line,
        kv_use=float(stats.get("kv_use", 0.0)),
        acceptance=dict(stats.get("acceptance", {})),
        histories=frozenset(stats.get("histories", ())),
    )


class SpecgateRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        # Per replica: the requests this router has in flight there, and its first choices
        # not yet sent (Serve routes a burst's requests concurrently: each choice counts at
        # once, or every request of the burst would see the same idle replica).
        self._in_flight = InFlightLog()
        self._chosen: deque[tuple[float, str]] = deque()
        self._prefixes = PrefixTable()

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        # A replica that is gone takes its cache with it (its restart starts empty).
        self._prefixes.keep_only(r.replica_id.unique_id for r in replicas)
        self._in_flight.keep_only({r.replica_id.unique_id for r in replicas})

    def _count(self, replica_id: str, delta: int) -> None:
        # Wall-clock time: replicas stamp their reports with it (replica.py).
        self._in_flight.add(replica_id, delta, time.time())

    def _choose(self, replica_id: str) -> None:
        now = time.monotonic()
        while self._chosen and self._chosen[0][0] < now - CHOICE_LAPSES_S:
            self._count(self._chosen.popleft()[1], -1)
        self._chosen.append((now, replica_id))
        self._count(replica_id, +1)

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        sent = replica_id.unique_id
        for choice in self._chosen:
            if choice[1] == sent:  # the choice was followed: it counts already
                self._chosen.remove(choice)
                return
        self._count(sent, +1)
        if self._chosen:  # Serve sent it elsewhere: the oldest choice was not followed
            self._count(self._chosen.popleft()[1], -1)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._count(replica_id.unique_id, -1)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        request = None
        if pending_request is not None and pending_request.args:
            first = pending_request.args[0]
            request = first if isinstance(first, GenerationRequest) else None
        if request is None:
            return [random.sample(candidate_replicas, len(candidate_replicas))]
        try:
            return self._ranked(candidate_replicas, request)
        except Exception:
            # Serve retries a router that raises, for ever: the request would hang. Any
            # replica serves it; the fault is logged.
            logger.exception("specgate's router failed; routing at random")
            return [random.sample(candidate_replicas, len(candidate_replicas))]

    def _mine_when_reported(self, replica_id: str, stats: dict[str, Any]) -> int | None:
        reported_at = stats.get("reported_at")
        if reported_at is None:
            return None
        return self._in_flight.at(replica_id, float(reported_at))

    def _ranked(
        self, candidate_replicas: list[RunningReplica], request: GenerationRequest
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        stats = {replica_id: r.routing_stats or {} for replica_id, r in by_id.items()}
        lines = {replica_id: learned_line(found) for replica_id, found in stats.items()}
        peers = shared_line([line for line in lines.values() if line is not None])
        reports = [
            report_of(
                replica_id,
                found,
                self._in_flight.now(replica_id),
                lines[replica_id] or peers,
                self._mine_when_reported(replica_id, found),
            )
            for replica_id, found in stats.items()
        ]
        chunks, chunk_tokens = prompt_chunks(request.prompt)
        cached = {r: self._prefixes.cached_tokens(r, chunks, chunk_tokens) for r in by_id}
        order = rank(reports, wants_of(request, cached))
        if order:
            self._choose(order[0])
            self._prefixes.sent(order[0], chunks)
        return [[by_id[replica_id]] for replica_id in order]
