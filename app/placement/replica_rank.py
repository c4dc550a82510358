"""Which engine replica should serve a request: the rule behind specgate's Ray Serve router
(app/serve_ray/router.py), pure, so it is tested with controlled inputs.

Each replica reports its batch (running and waiting requests, KV use), its step-cost line as
it has measured it, and how often drafts land there by class. A request brings whether it
will draft, its class's acceptance and the key of its drafter history (tenant and class).

The rule ranks replicas by the time the request would add per output token: its own time per
token there (the step it would join, over the tokens it can expect a step, drafts included),
plus what joining costs the requests already running (each of their steps grows by the same
amount), plus the queue ahead of it spread over its answer, plus its prompt: the tokens the
replica's prefix cache does not hold go through a step that it and every running request wait
on. So a request that drafts goes where the batch leaves drafting worth it, one that does not
goes where it slows others least, and an agent's next turn goes back to the replica that holds
its conversation for as long as that saves more than the batch there costs.

History: a suffix drafter drafts from the earlier answers its replica holds, so the requests
of one tenant and class gain by staying together. The replica that holds the key's history
(or, before any does, the key's home by rendezvous hashing) goes first while its load stays
within a bound of the average, as consistent hashing with bounded loads does, and while it
is as lightly loaded as any or the time it adds stays within a margin of the best replica's:
past either the key spills to the best, and the bounds keep one busy key from piling onto a
replica. (A floor of a few requests under the load bound, tried first, kept keys together at
low load; on two replicas paced by the CPU's measured line that cost 9 % in the quiet phases
against power of two choices: bench/RESULTS.md.)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.drafting.length_rule import (
    Candidate,
    StepCost,
    StepCostPrior,
    choose_lengths,
    expected_tokens,
)

# A replica whose KV cache is this full would preempt or queue what it takes: it goes last.
KV_FULL = 0.95
# Bounded loads: a replica takes a key's requests first while its load (running and waiting,
# this request included) is at most this many times the average (Mirrokni et al.'s c)...
LOAD_BOUND = 1.25
# ... and the time it adds is at most this much more than the best replica's: what a history
# may cost. A guess at what drafting from it gains, not a measurement.
HISTORY_MARGIN = 0.05
# Output tokens a request is assumed to write, to spread a queue's wait over its answer.
EXPECTED_OUTPUT_TOKENS = 128


@dataclass(frozen=True)
class ReplicaReport:
    """What one replica reports of itself (its `record_routing_stats()`)."""

    replica_id: str
    running: int
    waiting: int
    step_cost: StepCostPrior
    kv_use: float = 0.0
    # Share of draft tokens that landed, by workload class, on this replica.
    acceptance: Mapping[str, float] = field(default_factory=dict)
    # Drafter-history keys (tenant and class) whose earlier answers the replica holds.
    histories: frozenset[str] = frozenset()

    @property
    def load(self) -> int:
        return self.running + self.waiting


@dataclass(frozen=True)
class Wants:
    """What a request brings to the choice."""

    # It will draft (the speculative route, or one engine with a draft length above 0).
    drafts: bool
    workload_class: str | None = None
    # The gateway's acceptance prior for its class (used where a replica has no figure).
    prior: float | None = None
    # The drafter-history key: the same tenant and class draft from the same answers.
    history: str | None = None
    max_draft: int = 5
    output_tokens: int = EXPECTED_OUTPUT_TOKENS
    # Prompt tokens, and by replica id those its prefix cache likely holds
    # (app/placement/prefix_table.py).
    prompt_tokens: int = 0
    cached_tokens: Mapping[str, int] = field(default_factory=dict)


def _acceptance(report: ReplicaReport, wants: Wants) -> float:
    """The request's class's acceptance on this replica, or its prior where it has none."""
    return report.acceptance.get(wants.workload_class or "", wants.prior or 0.0)


def draft_length(report: ReplicaReport, wants: Wants) -> int:
    """The draft length the rule gives the request in this replica's batch (0: none)."""
    acceptance = _acceptance(report, wants)
    if not wants.drafts or acceptance <= 0:
        return 0
    line = StepCost(report.step_cost, fixed=True)
    [length] = choose_lengths([Candidate(wants.max_draft, acceptance)], report.running + 1, line)
    return length


def time_added_ms(report: ReplicaReport, wants: Wants) -> float:
    """Milliseconds per output token the request would add on this replica: its own time
    per token, what its joining costs the running requests, the queue ahead of it, and its
    prompt's uncached tokens, computed in one step that the request and the running wait on."""
    line = StepCost(report.step_cost, fixed=True)
    running = report.running
    sequences = running + 1
    acceptance = _acceptance(report, wants)
    draft = draft_length(report, wants)
    tokens = expected_tokens(acceptance, draft)
    before = line.predict(running, running) if running else 0.0
    after = line.predict(sequences, sequences + draft, drafting=draft > 0)
    own = after / tokens
    others = running * (after - before) / tokens
    answer = max(1, wants.output_tokens)
    queue = report.waiting * after / answer
    uncached = max(0, wants.prompt_tokens - wants.cached_tokens.get(report.replica_id, 0))
    prefill = line.predict(sequences, sequences + uncached) - line.predict(sequences, sequences)
    return own + others + queue + sequences * prefill / answer


def _home(key: str, replica_id: str) -> int:
    """Rendezvous hashing: the replica with the highest weight is the key's home."""
    return int.from_bytes(hashlib.sha256(f"{key}|{replica_id}".encode()).digest()[:8], "big")


def rank(reports: Sequence[ReplicaReport], wants: Wants) -> list[str]:
    """Replica ids, best first."""
    if not reports:
        return []
    added = {r.replica_id: time_added_ms(r, wants) for r in reports}
    # KV-full replicas last; then by the time added.
    order = sorted(reports, key=lambda r: (r.kv_use >= KV_FULL, added[r.replica_id]))
    if wants.history is None:
        return [r.replica_id for r in order]
    total = sum(r.load for r in reports) + 1
    bound = math.ceil(LOAD_BOUND * total / len(reports))
    dearest = added[order[0].replica_id] * (1 + HISTORY_MARGIN)
    least = min(r.load for r in reports)

    def affordable(r: ReplicaReport) -> bool:
        # As loaded as any (replicas' learned lines differ by noise), or within the margin.
        return r.load <= least or added[r.replica_id] <= dearest

    within = [r for r in order if r.load + 1 <= bound and r.kv_use < KV_FULL and affordable(r)]
    holders = [r for r in within if wants.history in r.histories]
    if holders:
        first = holders[0]
    elif within and not any(wants.history in r.histories for r in reports):
        first = max(within, key=lambda r: _home(wants.history or "", r.replica_id))
    else:
        return [r.replica_id for r in order]
    return [first.replica_id, *(r.replica_id for r in order if r is not first)]
