"""What each endpoint last said of its load, and what the picker sent it since.

A model server's /metrics says how many requests it runs and queues and how full its KV
cache is: vLLM as `vllm:num_requests_running`, `vllm:num_requests_waiting` and
`vllm:kv_cache_usage_perc`; specgate as `specgate_requests_in_flight` (admitted, generating)
and `specgate_queued_requests` (waiting for a slot), by route, and the tokens its drafts
yield per step by workload class (`specgate_mean_accepted_length`). The two families are
summed: a server exposes one or the other.

Scrapes come every `scrape_interval_s`, and a burst arrives between two. As the Ray Serve
router counts what it has in flight (app/serve_ray/router.py), the book counts each pick as
one more running request until a scrape that began after the pick has answered: that scrape
saw the request, running or done.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from app.drafting.length_rule import expected_tokens

RUNNING = ("vllm:num_requests_running", "specgate_requests_in_flight")
WAITING = ("vllm:num_requests_waiting", "specgate_queued_requests")
# vLLM's name since 0.10, and the one before it.
KV_USE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "specgate_replica_kv_use")
ACCEPTED_LENGTH = "specgate_mean_accepted_length"


@dataclass(frozen=True)
class EndpointLoad:
    running: int = 0
    waiting: int = 0
    kv_use: float = 0.0
    # Per-position draft acceptance by workload class, where the server has measured it.
    acceptance: Mapping[str, float] = field(default_factory=dict)


def parse_metrics(text: str, max_draft: int) -> EndpointLoad:
    """An endpoint's load from its Prometheus text; ValueError if the text is not that."""
    running = waiting = 0.0
    kv_use: list[float] = []
    steps: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in RUNNING:
                running += sample.value
            elif sample.name in WAITING:
                waiting += sample.value
            elif sample.name in KV_USE:
                kv_use.append(sample.value)
            elif sample.name in (f"{ACCEPTED_LENGTH}_sum", f"{ACCEPTED_LENGTH}_count"):
                totals = steps.setdefault(sample.labels.get("workload_class", ""), [0.0, 0.0])
                totals[sample.name.endswith("_count")] += sample.value
    acceptance = {
        workload: position_acceptance(total / count, max_draft)
        for workload, (total, count) in steps.items()
        if count > 0
    }
    return EndpointLoad(
        running=round(running),
        waiting=round(waiting),
        # An engine per data-parallel rank: the fullest decides what a new request meets.
        kv_use=max(kv_use, default=0.0),
        acceptance=acceptance,
    )


def position_acceptance(tokens_per_step: float, max_draft: int) -> float:
    """The per-position acceptance a whose drafts of `max_draft` yield `tokens_per_step`
    (1 + a + ... + a^k): what the ranking rule takes, from what specgate reports.

    specgate's adaptive engine drafts up to k, fewer where the batch asks it to, so this
    reads a little low; it only orders endpoints against each other.
    """
    low, high = 0.0, 0.99
    if tokens_per_step <= 1:
        return low
    if tokens_per_step >= expected_tokens(high, max_draft):
        return high
    for _ in range(30):  # bisection: expected_tokens grows with a
        middle = (low + high) / 2
        if expected_tokens(middle, max_draft) < tokens_per_step:
            low = middle
        else:
            high = middle
    return round((low + high) / 2, 4)


class LoadBook:
    """Per endpoint: its last scraped load (None before the first, or after a failure) and
    the picks not yet seen by a scrape."""

    def __init__(self, addresses: Iterable[str]) -> None:
        self._loads: dict[str, EndpointLoad | None] = dict.fromkeys(addresses)
        self._picks: dict[str, deque[float]] = {address: deque() for address in self._loads}

    def keep_only(self, addresses: Iterable[str]) -> None:
        """The endpoints now listed: new ones start unknown (not ready), gone ones are forgotten."""
        listed = list(addresses)
        for gone in set(self._loads) - set(listed):
            del self._loads[gone], self._picks[gone]
        for address in listed:
            if address not in self._loads:
                self._loads[address], self._picks[address] = None, deque()

    def record(self, address: str, load: EndpointLoad, scrape_began: float) -> None:
        if address not in self._loads:
            return  # delisted while its scrape was out
        self._loads[address] = load
        picks = self._picks[address]
        while picks and picks[0] < scrape_began:
            picks.popleft()

    def failed(self, address: str) -> None:
        # Down until a scrape answers again: a server that cannot say its load may not
        # serve either, and the protocol sends a request nowhere rather than into a hole.
        if address in self._loads:
            self._loads[address] = None

    def picked(self, address: str, now: float) -> None:
        self._picks[address].append(now)

    def ready(self, address: str) -> bool:
        return self._loads.get(address) is not None

    def load(self, address: str) -> EndpointLoad | None:
        """The last scrape, with the picks it did not see counted as running."""
        found = self._loads.get(address)
        if found is None:
            return None
        return replace(found, running=found.running + len(self._picks[address]))
