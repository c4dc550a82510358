"""The X-Speculative header: what it may say, and the 400s the API layer makes of refusals."""

from __future__ import annotations

import pytest

from app.api.speculative_header import no_route_error, parse_header
from app.errors import InvalidRequestError
from app.routing.policy import ClientChoice, NoRoute
from app.vocabulary import Refusal


@pytest.mark.parametrize("value", [None, "auto", "ON", " off "])
def test_header_values(value: str | None) -> None:
    assert parse_header(value).preference in ("on", "off", "auto")


def test_a_bad_header_value_is_a_client_error() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_header("sometimes")
    assert caught.value.param == "X-Speculative"
    assert caught.value.status_code == 400


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


def test_a_route_that_cannot_serve_the_request_is_named_with_the_way_out() -> None:
    drafting = Refusal(("min_p",), "not supported while drafting")
    forced = no_route_error(NoRoute("speculative", drafting, other_serves=True))
    assert (forced.param, forced.code) == ("X-Speculative", "unsupported_with_speculation")
    assert forced.message == (
        "min_p: not supported while drafting on the speculative route; send X-Speculative: auto"
    )
    remote = Refusal(("logprobs",), "not supported by remote upstreams")
    nowhere = no_route_error(NoRoute("plain", remote, other_serves=False))
    assert (nowhere.param, nowhere.code) == ("logprobs", "unsupported_on_route")
