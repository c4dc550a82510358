"""Prometheus metrics, labelled by route (speculative or plain). Each app gets its own registry."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.engine.generation import SuffixCacheCounts
from app.routing.classify import WorkloadClass
from app.routing.policy import MoveCause
from app.vocabulary import ROUTES, Route, SpecDecodeStats, other_route

if TYPE_CHECKING:
    from app.routing.feedback import RunReport
    from app.routing.learner import Learner
    from app.routing.policy import RouteDecision

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1)
_RATE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_LENGTH_BUCKETS = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8)


class SuffixCacheCollector(Collector):
    """The suffix drafter's trees of earlier answers, as its engine last reported them
    (GET /metrics asks it first: the counts live in the engine's worker process)."""

    def __init__(self) -> None:
        self.counts: SuffixCacheCounts | None = None

    def collect(self) -> list[Metric]:
        counts = self.counts
        if counts is None:
            return []
        return [
            GaugeMetricFamily(
                "specgate_suffix_cache_tenants",
                "Tenants with a suffix tree of earlier answers.",
                value=counts.tenants,
            ),
            GaugeMetricFamily(
                "specgate_suffix_cache_answers",
                "Earlier answers held for suffix drafting, all tenants together.",
                value=counts.cached_answers,
            ),
            GaugeMetricFamily(
                "specgate_suffix_cache_tokens",
                "Tokens of the earlier answers held for suffix drafting.",
                value=counts.cached_tokens,
            ),
            CounterMetricFamily(
                "specgate_suffix_cache_proposals",
                "Steps at which a request asked the suffix drafter for a draft.",
                value=counts.proposals,
            ),
            CounterMetricFamily(
                "specgate_suffix_cache_hits",
                "Steps at which the suffix drafter found a draft.",
                value=counts.hits,
            ),
            CounterMetricFamily(
                "specgate_suffix_cache_evictions",
                "Earlier answers dropped to keep the suffix trees within their bounds.",
                value=counts.evictions,
            ),
        ]


class ReplicaCollector(Collector):
    """Each engine replica's routing report (Ray Serve), as the replicas last gave it
    (GET /metrics asks them first)."""

    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}

    def collect(self) -> list[Metric]:
        if not self.reports:
            return []
        families = {
            key: GaugeMetricFamily(f"specgate_replica_{key}", about, labels=["replica"])
            for key, about in (
                ("running", "Requests generating on the replica."),
                ("waiting", "Requests on the replica that have no token yet."),
                ("kv_use", "Share of the replica's KV cache its requests hold."),
            )
        }
        acceptance = GaugeMetricFamily(
            "specgate_replica_acceptance",
            "Share of draft tokens that landed on the replica, by workload class.",
            labels=["replica", "workload_class"],
        )
        for replica, report in sorted(self.reports.items()):
            for key, family in families.items():
                family.add_metric([replica], float(report.get(key, 0.0)))
            for workload, rate in sorted(report.get("acceptance", {}).items()):
                acceptance.add_metric([replica, workload], float(rate))
        return [*families.values(), acceptance]


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.suffix_cache = SuffixCacheCollector()
        r.register(self.suffix_cache)
        self.replicas = ReplicaCollector()
        r.register(self.replicas)
        self.requests = Counter(
            "specgate_requests",
            "Requests answered, by route, workload class, endpoint and outcome.",
            ["route", "workload_class", "endpoint", "outcome"],
            registry=r,
        )
        # By the key's name from the key file (never the key; "" on an open server).
        self.key_requests = Counter(
            "specgate_key_requests",
            "Requests served, by API key name and outcome.",
            ["key", "outcome"],
            registry=r,
        )
        self.key_tokens = Counter(
            "specgate_key_tokens",
            "Tokens by API key name and kind: prompt, completion, drafted, accepted.",
            ["key", "kind"],
            registry=r,
        )
        self.key_refusals = Counter(
            "specgate_key_refusals",
            "Requests refused with a 429, by API key name and code.",
            ["key", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "specgate_request_duration_seconds",
            "Time from routing to the last token, by route.",
            ["route", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            "specgate_time_to_first_token_seconds",
            "Time from routing to the first generated token, by route.",
            ["route", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            "specgate_inter_token_latency_seconds",
            "Mean time per generated token after the first, per request, by route.",
            ["route"],
            buckets=_TOKEN_LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "specgate_routing_decisions",
            "Routing decisions by workload class, chosen route and basis (header, unsupported, "
            "pinned, temperature, load, acceptance, learned, adaptive, prediction, explore, "
            "fallback).",
            ["workload_class", "route", "basis"],
            registry=r,
        )
        self.switches = Counter(
            "specgate_mid_stream_switches",
            "Requests moved between engines mid-stream, by direction and cause (drafting: the "
            "request's own drafting yield; load: the work in flight).",
            ["direction", "cause"],
            registry=r,
        )
        # At 0 from the start: a dashboard shows "no switches" rather than "no data".
        for source in ROUTES:
            for cause in get_args(MoveCause):
                direction = f"{source}_to_{other_route(source)}"
                self.switches.labels(direction=direction, cause=cause)
        self.acceptance_rate = Histogram(
            "specgate_acceptance_rate",
            "Per-request draft acceptance rate on the speculative engine, by workload class.",
            ["workload_class"],
            buckets=_RATE_BUCKETS,
            registry=r,
        )
        self.accepted_length = Histogram(
            "specgate_mean_accepted_length",
            "Per-request tokens emitted per verification step (accepted drafts + 1), by class.",
            ["workload_class"],
            buckets=_LENGTH_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "specgate_prompt_tokens", "Prompt tokens processed.", ["route"], registry=r
        )
        self.completion_tokens = Counter(
            "specgate_completion_tokens", "Tokens generated.", ["route"], registry=r
        )
        self.in_flight = Gauge(
            "specgate_requests_in_flight", "Requests being served.", ["route"], registry=r
        )
        self.engine_unfinished = Gauge(
            "specgate_engine_unfinished_requests",
            "Requests the engine itself still holds; 0 when idle, so aborts are visible. With "
            "one engine for both routes, both routes show its count.",
            ["route"],
            registry=r,
        )
        self.spec_drafts = Counter(
            "specgate_spec_decode_drafts",
            "Speculative verification steps that checked a draft.",
            ["route"],
            registry=r,
        )
        self.queued = Gauge(
            "specgate_queued_requests",
            "Requests waiting in specgate's queue for a slot on the engine.",
            ["route"],
            registry=r,
        )
        self.rejected = Counter(
            "specgate_rejected_requests",
            "Requests refused by admission control: at_capacity (429) or queue_timeout (503).",
            ["route", "reason"],
            registry=r,
        )
        self.spec_draft_tokens = Counter(
            "specgate_spec_decode_draft_tokens", "Draft tokens proposed.", ["route"], registry=r
        )
        self.spec_accepted_tokens = Counter(
            "specgate_spec_decode_accepted_tokens",
            "Draft tokens accepted by the target model.",
            ["route"],
            registry=r,
        )
        self.learned_speedup = Gauge(
            "specgate_learned_speedup",
            "The router's learned speed-up of the speculative route over the plain one, by "
            "workload class: plain over speculative ms per token, each alone on its engine "
            "(expected_speedup in /v1/routing).",
            ["workload_class"],
            registry=r,
        )

    def watch_queue(self, route: Route, waiting: Callable[[], int]) -> None:
        self.queued.labels(route=route).set_function(waiting)
        for reason in ("at_capacity", "queue_timeout"):
            self.rejected.labels(route=route, reason=reason)

    def watch_engine(self, route: Route, unfinished: Callable[[], int]) -> None:
        self.engine_unfinished.labels(route=route).set_function(unfinished)
        if route == "speculative":
            # Expose the counters at 0 from the start, so dashboards see the series.
            for counter in (self.spec_drafts, self.spec_draft_tokens, self.spec_accepted_tokens):
                counter.labels(route=route)

    def watch_learner(self, learner: Learner) -> None:
        # Read at each scrape, so the gauge always shows the estimate the router is using.
        for workload in WorkloadClass:
            self.learned_speedup.labels(workload_class=workload.value).set_function(
                partial(learner.speedup_alone, workload)
            )

    def record_decision(self, decision: RouteDecision) -> None:
        self.decisions.labels(
            workload_class=decision.workload_class.value,
            route=decision.route,
            basis=decision.basis,
        ).inc()

    def record_run(self, run: RunReport) -> None:
        route, workload = run.decision.route, run.decision.workload_class.value
        self.in_flight.labels(route=run.route).dec()
        self.requests.labels(
            route=route, workload_class=workload, endpoint=run.endpoint, outcome=run.outcome
        ).inc()
        if run.outcome == "error" or run.finished_at is None:
            return
        self.latency.labels(route=route, endpoint=run.endpoint).observe(
            run.finished_at - run.started_at
        )
        if run.time_to_first_token is not None:
            self.time_to_first_token.labels(route=route, endpoint=run.endpoint).observe(
                run.time_to_first_token
            )
        if run.inter_token_latency is not None:
            self.inter_token_latency.labels(route=route).observe(run.inter_token_latency)
        self.prompt_tokens.labels(route=route).inc(run.prompt_tokens)
        self.completion_tokens.labels(route=route).inc(run.completion_tokens)
        if run.speculative_stats is not None:
            self._record_spec("speculative", workload, run.speculative_stats)

    def record_key_usage(self, key: str, run: RunReport) -> None:
        self.key_requests.labels(key=key, outcome=run.outcome).inc()
        tokens = {"prompt": run.prompt_tokens, "completion": run.completion_tokens}
        if run.draft_stats is not None:
            tokens["drafted"] = run.draft_stats.draft_tokens
            tokens["accepted"] = run.draft_stats.accepted_tokens
        for kind, count in tokens.items():
            self.key_tokens.labels(key=key, kind=kind).inc(count)

    def _record_spec(self, route: Route, workload: str, stats: SpecDecodeStats) -> None:
        self.spec_drafts.labels(route=route).inc(stats.drafts)
        self.spec_draft_tokens.labels(route=route).inc(stats.draft_tokens)
        self.spec_accepted_tokens.labels(route=route).inc(stats.accepted_tokens)
        if stats.draft_tokens:
            self.acceptance_rate.labels(workload_class=workload).observe(stats.acceptance_rate)
            self.accepted_length.labels(workload_class=workload).observe(stats.accepted_length)

    def render(self) -> bytes:
        return generate_latest(self.registry)
