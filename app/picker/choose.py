"""The picker's inputs in the ranking rule's terms (app/placement/replica_rank.py), as the Ray
Serve router adapts Ray's (app/serve_ray/router.py): an endpoint's scrape becomes a
`ReplicaReport`, a request's facts a `Wants`. Pure, so it is tested with controlled values.

One thing differs from the router's replicas: endpoints need not serve a request alike. A
specgate server drafts per request, a vLLM server of the drafting pool drafts every request
and one of the plain pool none. The rule ranks endpoints that would serve the request alike
together; such groups are then ordered by the time their best endpoint would add.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from app.drafting.length_rule import StepCostPrior
from app.picker.endpoints import Endpoint
from app.picker.load import EndpointLoad
from app.picker.request import RequestFacts
from app.placement.replica_rank import (
    EXPECTED_OUTPUT_TOKENS,
    KV_FULL,
    ReplicaReport,
    Wants,
    draft_length,
    rank,
    time_added_ms,
)
from app.routing.learner import PRIOR_POSITION_ACCEPTANCE


@dataclass(frozen=True)
class Pick:
    # Best first: the chosen endpoint, then its fallbacks.
    addresses: tuple[str, ...]
    # X-Speculative for a specgate endpoint (auto;k=N or off); None: leave the request's own.
    speculative: str | None
    workload_class: str | None

    @property
    def destination(self) -> str:
        return ",".join(self.addresses)


@dataclass(frozen=True)
class Refusal:
    status: int  # 429: all saturated; 503: none to send it to
    message: str
    # The OpenAI error body's code, as specgate's own errors name theirs (app/errors.py).
    code: str


def would_draft(facts: RequestFacts, max_temperature: float | None) -> bool:
    """Whether the request is one that drafting may serve, before any load is known."""
    if facts.choice is not None:
        return facts.choice.preference == "on"
    if facts.workload_class is None or facts.features is None:
        return False
    return max_temperature is None or facts.features.temperature <= max_temperature


def report_of(
    endpoint: Endpoint, load: EndpointLoad, line: StepCostPrior, histories: frozenset[str]
) -> ReplicaReport:
    return ReplicaReport(
        endpoint.address,
        running=load.running,
        waiting=load.waiting,
        step_cost=line,
        kv_use=load.kv_use,
        acceptance=dict(load.acceptance),
        histories=histories,
    )


def wants_of(
    facts: RequestFacts,
    endpoint: Endpoint,
    drafts: bool,
    prompt_tokens: int,
    cached_tokens: Mapping[str, int],
) -> Wants:
    """What the request brings to `endpoint`: a vLLM server drafts whatever it is sent, a
    specgate server only what the picker (or the client) lets it."""
    drafting = endpoint.pool == "drafting" or (endpoint.kind == "specgate" and drafts)
    workload = facts.workload_class
    asked = facts.choice.draft_length if facts.choice is not None else None
    return Wants(
        drafts=drafting,
        workload_class=None if workload is None else workload.value,
        prior=None if workload is None else PRIOR_POSITION_ACCEPTANCE.get(workload, 0.3),
        history=facts.history if drafting else None,
        max_draft=min(asked or endpoint.max_draft, endpoint.max_draft),
        output_tokens=facts.max_tokens or EXPECTED_OUTPUT_TOKENS,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
    )


def saturated(load: EndpointLoad, queue_limit: int) -> bool:
    # A full KV cache with a queue behind it preempts whatever joins.
    return load.waiting >= queue_limit or (load.kv_use >= KV_FULL and load.waiting > 0)


def ordered(
    reports: Sequence[ReplicaReport], wants: Mapping[str, Wants], always_drafts: Collection[str]
) -> list[str]:
    """Endpoint addresses, best first: each group of like Wants ranked by the rule, groups by
    what their best endpoint adds, a KV-full best last.

    `always_drafts`: endpoints that draft every request whatever the batch (vLLM's drafting
    pool). The rule prices drafting at the length it would choose, none where drafting does
    not pay; such an endpoint would draft anyway, so where the rule gives it no draft its
    group goes after the others that tie with it.
    """
    # Within one request's Wants only these differ (Wants holds a dict: it cannot be a key).
    groups: dict[tuple[bool, int, str | None], list[ReplicaReport]] = {}
    for report in reports:
        one = wants[report.replica_id]
        groups.setdefault((one.drafts, one.max_draft, one.history), []).append(report)
    ranked = []
    for members in groups.values():
        alike = wants[members[0].replica_id]
        order = rank(members, alike)
        head = next(r for r in members if r.replica_id == order[0])
        wasted = head.replica_id in always_drafts and draft_length(head, alike) == 0
        ranked.append(((head.kv_use >= KV_FULL, time_added_ms(head, alike), wasted), order))
    ranked.sort(key=lambda entry: entry[0])
    return [address for _, order in ranked for address in order]


def speculative_header(endpoint: Endpoint, facts: RequestFacts, length: int) -> str | None:
    """X-Speculative for the chosen endpoint: none for vLLM (its pool decides) or where the
    client chose; else `off` where the rule gives no draft in that batch, and where it gives
    one `auto;k=N` with the endpoint's own K: the server re-chooses the length every step from
    its batch as it is then and the request's acceptance so far, which the picker's scrape (up
    to an interval old) and class prior cannot match. (The rule's own length as a fixed
    `on;k=N` made quiet-phase requests draft about 3.9 tokens a step where the servers chose
    4.7, and cost 4.7 % on the changing-load schedule: bench/RESULTS.md.)"""
    if endpoint.kind != "specgate" or facts.choice is not None:
        return None
    return f"auto;k={endpoint.max_draft}" if length > 0 else "off"
