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
from collections import Counter, deque
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
    replica_id: str, stats: dict[str, Any], in_flight: int, line: StepCostPrior
) -> ReplicaReport:
    """A replica's report from its routing stats (empty before its first), with what this
    router has in flight there: requests it sent since the report count as running."""
    waiting = int(stats.get("waiting", 0))
    return ReplicaReport(
        replica_id,
        running=max(int(stats.get("running", 0)), in_flight - waiting),
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
        self._in_flight: Counter[str] = Counter()
        self._chosen: deque[tuple[float, str]] = deque()
        self._prefixes = PrefixTable()

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        # A replica that is gone takes its cache with it (its restart starts empty).
        self._prefixes.keep_only(r.replica_id.unique_id for r in replicas)

    def _choose(self, replica_id: str) -> None:
        now = time.monotonic()
        while self._chosen and self._chosen[0][0] < now - CHOICE_LAPSES_S:
            self._in_flight[self._chosen.popleft()[1]] -= 1
        self._chosen.append((now, replica_id))
        self._in_flight[replica_id] += 1

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        sent = replica_id.unique_id
        for choice in self._chosen:
            if choice[1] == sent:  # the choice was followed: it counts already
                self._chosen.remove(choice)
                return
        self._in_flight[sent] += 1
        if self._chosen:  # Serve sent it elsewhere: the oldest choice was not followed
            self._in_flight[self._chosen.popleft()[1]] -= 1

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._in_flight[replica_id.unique_id] -= 1

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

    def _ranked(
        self, candidate_replicas: list[RunningReplica], request: GenerationRequest
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        stats = {replica_id: r.routing_stats or {} for replica_id, r in by_id.items()}
        lines = {replica_id: learned_line(found) for replica_id, found in stats.items()}
        peers = shared_line([line for line in lines.values() if line is not None])
        reports = [
            report_of(replica_id, found, self._in_flight[replica_id], lines[replica_id] or peers)
            for replica_id, found in stats.items()
        ]
        chunks, chunk_tokens = prompt_chunks(request.prompt)
        cached = {r: self._prefixes.cached_tokens(r, chunks, chunk_tokens) for r in by_id}
        order = rank(reports, wants_of(request, cached))
        if order:
            self._choose(order[0])
            self._prefixes.sent(order[0], chunks)
        return [[by_id[replica_id]] for replica_id in order]
