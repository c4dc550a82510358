"""Draft length per request: the X-Speculative header's k, and one engine serving both routes."""

from __future__ import annotations

import pytest

from app.engine.fake import FakeEngine
from app.engine.route_view import route_views
from app.engine.types import GenerationRequest, SamplingOptions
from app.errors import InvalidRequestError
from app.gateway import Gateway
from app.main import build_gateway
from app.routing.features import extract_features
from app.routing.policy import ClientChoice, parse_header
from app.settings import Settings

JSON_TASK = extract_features('[{"a": 1, "b": 2},\n {"a": 3, "b": 4},\n {"a": 5,', temperature=0)
POEM = extract_features("Write a poem about the sea.", temperature=1.0)


@pytest.mark.parametrize(
    ("value", "choice"),
    [
        ("on;k=3", ClientChoice("on", 3)),
        (" AUTO ; k=2 ", ClientChoice("auto", 2)),
        ("on", ClientChoice("on", None)),
        (None, ClientChoice("auto", None)),
    ],
)
def test_the_header_may_carry_a_draft_length(value: str | None, choice: ClientChoice) -> None:
    assert parse_header(value) == choice


@pytest.mark.parametrize(
    "value", ["off;k=2", "on;k=0", "on;k=x", "on;j=3", "on;k=-1", "of;k=1", "on;k=²", "on;k=٣"]
)
def test_a_bad_draft_length_is_a_client_error(value: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_header(value)
    assert (caught.value.status_code, caught.value.param) == (400, "X-Speculative")


def embedded_gateway() -> tuple[Gateway, FakeEngine, FakeEngine]:
    speculative = FakeEngine("speculative", per_request_draft_length=True)
    plain = FakeEngine("plain")
    settings = Settings(routing_exploration=0)
    gate = build_gateway(settings, {"speculative": speculative, "plain": plain})  # type: ignore[dict-item]
    return gate, speculative, plain


async def test_the_speculative_engine_gets_the_clients_draft_length() -> None:
    gate, speculative, _ = embedded_gateway()
    decision = gate.decide("on;k=2", JSON_TASK)
    assert (decision.route, decision.draft_length) == ("speculative", 2)
    run = await gate.start(decision, "r1", ["a b c"], SamplingOptions(max_tokens=3), "chat")
    await run.collect()
    assert [request.draft_length for request in speculative.requests] == [2]


def test_a_draft_length_routed_plain_is_dropped() -> None:
    gate, _, _ = embedded_gateway()
    decision = gate.decide("auto;k=2", POEM)
    assert (decision.route, decision.draft_length) == ("plain", None)


def test_a_draft_length_over_the_engines_k_is_refused() -> None:
    gate, _, _ = embedded_gateway()
    with pytest.raises(InvalidRequestError, match="num_speculative_tokens 5"):
        gate.decide("on;k=6", JSON_TASK)


def test_a_speculative_route_that_cannot_take_a_length_refuses_one() -> None:
    engines = {"speculative": FakeEngine("speculative"), "plain": FakeEngine("plain")}
    gate = build_gateway(Settings(), engines)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError) as caught:
        gate.decide("on;k=2", JSON_TASK)
    assert caught.value.code == "unsupported_draft_length"


async def test_one_engine_serves_both_routes_with_its_own_draft_lengths() -> None:
    shared = FakeEngine("speculative", per_request_draft_length=True)
    views = route_views(shared)
    options = SamplingOptions(max_tokens=2)
    plain_steps = views["plain"].generate(GenerationRequest("p", "a b", options, 4))
    await anext(plain_steps)  # type: ignore[arg-type]
    assert (views["plain"].unfinished_requests(), views["speculative"].unfinished_requests()) == (
        1,
        0,
    )
    async for _ in views["speculative"].generate(GenerationRequest("s", "a b", options, 3)):
        pass
    async for _ in plain_steps:
        pass
    assert [(r.request_id, r.draft_length) for r in shared.requests] == [("p", 0), ("s", 3)]
    assert views["plain"].unfinished_requests() == 0
    assert views["plain"].facts is shared.facts  # the engine's own facts
    await views["plain"].aclose()
    assert views["speculative"].is_alive()
