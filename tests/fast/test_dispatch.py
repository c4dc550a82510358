"""The dispatcher: load across engines, and what finished requests teach the router."""

from __future__ import annotations

from app.dispatch import Dispatcher
from app.drafters import NGRAM
from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import SamplingOptions
from app.main import build_gateway
from app.routing.features import extract_features
from app.routing.load_model import Load
from app.routing.policy import ClientChoice
from app.settings import Settings

JSON_TASK = extract_features('[{"a": 1, "b": 2},\n {"a": 3, "b": 4},\n {"a": 5,', temperature=0)


AUTO, ON, OFF = ClientChoice("auto"), ClientChoice("on"), ClientChoice("off")


def dispatcher() -> Dispatcher:
    engines = {"speculative": FakeEngine("speculative"), "plain": FakeEngine("plain")}
    settings = Settings(
        routing_exploration=0, routing_max_speculative_load=4, speculative_config=NGRAM
    )
    return build_gateway(settings, engines).dispatcher  # type: ignore[arg-type]


def test_requests_on_either_engine_count_as_load() -> None:
    gate = dispatcher()
    assert gate.decide(AUTO, JSON_TASK).route == "speculative"
    gate.in_flight.add("plain", 3)
    gate.in_flight.add("speculative", 1)
    decision = gate.decide(AUTO, JSON_TASK)
    assert (decision.route, decision.basis) == ("plain", "load")
    assert decision.reason == "load: 4 requests in flight"
    assert decision.load == Load(plain=3, speculative=1)
    assert gate.decide(ON, JSON_TASK).route == "speculative"  # the header still wins


async def test_a_running_request_is_load_until_it_ends() -> None:
    gate = dispatcher()
    decision = gate.decide(OFF, JSON_TASK)
    run = await gate.start(decision, "r1", ["a b c"], SamplingOptions(max_tokens=5, n=2), "chat")
    assert gate.in_flight.now() == Load(plain=2)
    (work,) = gate.running.work()
    assert work.route == "plain" and work.remaining_tokens > 0
    await run.collect()
    assert gate.in_flight.now() == Load()
    assert gate.running.work() == ()


async def test_finished_requests_teach_the_router() -> None:
    gate = dispatcher()
    options = SamplingOptions(max_tokens=5)
    for i, header in enumerate((OFF, ON)):
        run = await gate.start(gate.decide(header, JSON_TASK), f"r{i}", ["a b c"], options, "chat")
        await run.collect()
    learner = gate.policy.learner
    estimates = learner.snapshot()["structured"]
    assert (estimates["plain_samples"], estimates["speculative_samples"]) == (1, 1)
    # The speculative run's own drafting figures, and the plain run's draft replay (the fake
    # engine gives token ids): a sample each of acceptance and of tokens per step.
    assert estimates["acceptance_samples"] == 2
    assert estimates["tokens_per_step_samples"] == 2
    assert learner.load_model.routes["plain"].samples == 1
    assert learner.load_model.routes["speculative"].samples == 1
