"""The gateway's wiring: load across engines, and what finished requests teach the router."""

from __future__ import annotations

from app.engine.fake import FakeEngine
from app.gateway import Gateway
from app.main import build_gateway
from app.routing.features import extract_features
from app.settings import Settings

JSON_TASK = extract_features('[{"a": 1, "b": 2},\n {"a": 3, "b": 4},\n {"a": 5,', temperature=0)


def gateway() -> tuple[Gateway, dict[str, FakeEngine]]:
    engines = {"speculative": FakeEngine("speculative"), "plain": FakeEngine("plain")}
    settings = Settings(routing_exploration=0, routing_max_speculative_load=4)
    return build_gateway(settings, engines), engines  # type: ignore[arg-type]


def test_requests_on_either_engine_count_as_load() -> None:
    gate, engines = gateway()
    assert gate.decide(None, JSON_TASK).route == "speculative"
    engines["plain"].active.update({"a", "b", "c"})
    engines["speculative"].active.add("d")
    decision = gate.decide("auto", JSON_TASK)
    assert (decision.route, decision.basis) == ("plain", "load")
    assert decision.reason == "load: 4 requests in flight"
    assert gate.decide("on", JSON_TASK).route == "speculative"  # the header still wins


async def test_finished_requests_teach_the_router() -> None:
    from app.engine.types import SamplingOptions

    gate, _ = gateway()
    decision = gate.decide("on", JSON_TASK)
    run = await gate.start(decision, "r1", ["a b c"], SamplingOptions(max_tokens=5), "completions")
    await run.collect()
    estimates = gate.router.learner.snapshot()["structured"]
    assert estimates["speculative_samples"] == 1
    assert estimates["acceptance_samples"] == 1
    assert estimates["plain_samples"] == 0
