"""Prometheus metrics, labelled by engine (route). Each app gets its own registry."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.engine.types import Route, SpecDecodeStats

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "specgate_requests",
            "Requests answered, by engine, endpoint and outcome.",
            ["engine", "endpoint", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "specgate_request_duration_seconds",
            "Time from routing to the last token, by engine.",
            ["engine", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "specgate_time_to_first_token_seconds",
            "Time from routing to the first generated token, by engine.",
            ["engine", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "specgate_prompt_tokens", "Prompt tokens processed.", ["engine"], registry=r
        )
        self.completion_tokens = Counter(
            "specgate_completion_tokens", "Tokens generated.", ["engine"], registry=r
        )
        self.in_flight = Gauge(
            "specgate_requests_in_flight", "Requests being served.", ["engine"], registry=r
        )
        self.engine_unfinished = Gauge(
            "specgate_engine_unfinished_requests",
            "Requests the engine itself still holds; 0 when idle, so aborts are visible.",
            ["engine"],
            registry=r,
        )
        self.spec_drafts = Counter(
            "specgate_spec_decode_drafts",
            "Speculative verification steps that checked a draft.",
            ["engine"],
            registry=r,
        )
        self.spec_draft_tokens = Counter(
            "specgate_spec_decode_draft_tokens", "Draft tokens proposed.", ["engine"], registry=r
        )
        self.spec_accepted_tokens = Counter(
            "specgate_spec_decode_accepted_tokens",
            "Draft tokens accepted by the target model.",
            ["engine"],
            registry=r,
        )

    def watch_engine(self, route: Route, unfinished: Callable[[], int]) -> None:
        self.engine_unfinished.labels(engine=route).set_function(unfinished)
        if route == "speculative":
            # Expose the counters at 0 from the start, so dashboards see the series.
            for counter in (self.spec_drafts, self.spec_draft_tokens, self.spec_accepted_tokens):
                counter.labels(engine=route)

    def record_spec(self, route: Route, stats: SpecDecodeStats) -> None:
        self.spec_drafts.labels(engine=route).inc(stats.drafts)
        self.spec_draft_tokens.labels(engine=route).inc(stats.draft_tokens)
        self.spec_accepted_tokens.labels(engine=route).inc(stats.accepted_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
