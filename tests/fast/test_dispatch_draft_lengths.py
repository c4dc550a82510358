"""Draft length per request: the X-Speculative header's k, and one engine serving both routes."""

from __future__ import annotations

import pytest

from app.api.speculative_header import checked, parse_header
from app.drafters import NGRAM
from app.engine.fakes.scripted import FakeEngine
from app.engine.generation import SamplingOptions
from app.errors import InvalidRequestError
from app.gateway import Gateway
from app.main import build_gateway
from app.routing.features import extract_features
from app.routing.policy import RouteDecision
from app.settings import Settings

JSON_TASK = extract_features('[{"a": 1, "b": 2},\n {"a": 3, "b": 4},\n {"a": 5,', temperature=0)
POEM = extract_features("Write a poem about the sea.", temperature=1.0)


def decide(gate: Gateway, header: str, features: object) -> RouteDecision:
    """What the handler's dependency and the dispatcher make of an X-Speculative value."""
    choice = checked(parse_header(header), gate.draft_lengths)
    return gate.dispatcher.decide(choice, features)  # type: ignore[arg-type]


def embedded_gateway() -> tuple[Gateway, FakeEngine, FakeEngine]:
    speculative = FakeEngine("speculative", per_request_draft_length=True)
    plain = FakeEngine("plain")
    settings = Settings(routing_exploration=0, speculative_config=NGRAM)  # K 5
    gate = build_gateway(settings, {"speculative": speculative, "plain": plain})  # type: ignore[dict-item]
    return gate, speculative, plain


async def test_the_speculative_engine_gets_the_clients_draft_length() -> None:
    gate, speculative, _ = embedded_gateway()
    decision = decide(gate, "on;k=2", JSON_TASK)
    assert (decision.route, decision.draft_length) == ("speculative", 2)
    run = await gate.dispatcher.start(
        decision, "r1", ["a b c"], SamplingOptions(max_tokens=3), "chat"
    )
    await run.collect()
    assert [request.draft_length for request in speculative.requests] == [2]


def test_a_draft_length_routed_plain_is_dropped() -> None:
    gate, _, _ = embedded_gateway()
    decision = decide(gate, "auto;k=2", POEM)
    assert (decision.route, decision.draft_length) == ("plain", None)


def test_a_draft_length_over_the_engines_k_is_refused() -> None:
    gate, _, _ = embedded_gateway()
    with pytest.raises(InvalidRequestError, match="num_speculative_tokens 5"):
        decide(gate, "on;k=6", JSON_TASK)


def test_a_speculative_route_that_cannot_take_a_length_refuses_one() -> None:
    engines = {"speculative": FakeEngine("speculative"), "plain": FakeEngine("plain")}
    gate = build_gateway(Settings(), engines)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError) as caught:
        decide(gate, "on;k=2", JSON_TASK)
    assert caught.value.code == "unsupported_draft_length"


async def test_one_engine_serves_both_routes_with_its_own_draft_lengths() -> None:
    shared = FakeEngine("speculative", per_request_draft_length=True)
    gate = build_gateway(Settings(), {"speculative": shared, "plain": shared})  # type: ignore[dict-item]
    options = SamplingOptions(max_tokens=2)
    dispatcher = gate.dispatcher
    plain = await dispatcher.start(decide(gate, "off", JSON_TASK), "p", ["a b"], options, "chat")
    speculative = decide(gate, "on;k=3", JSON_TASK)
    await (await dispatcher.start(speculative, "s", ["a b"], options, "chat")).collect()
    await plain.collect()
    # The plain route's request never drafts; the speculative one drafts what was asked.
    assert [(r.request_id, r.draft_length) for r in shared.requests] == [("p", 0), ("s", 3)]
    assert shared.unfinished_requests() == 0
