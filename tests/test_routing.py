from __future__ import annotations

import pytest

from app.errors import InvalidRequestError
from app.routing.classify import WorkloadClass, classify
from app.routing.policy import decide, parse_preference

LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 6


@pytest.mark.parametrize(
    ("prompt", "wants_json", "expected"),
    [
        ("Write a poem about the sea at night.", False, WorkloadClass.OPEN_ENDED),
        ("Tell me a story about a dragon.", False, WorkloadClass.OPEN_ENDED),
        ("Write a Python function that checks if a number is prime.", False, WorkloadClass.CODE),
        ("def add(a, b):\n    return a + b\n", False, WorkloadClass.CODE),
        ("List three colours.", True, WorkloadClass.STRUCTURED),
        ('Continue: [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3,', False,
         WorkloadClass.STRUCTURED),
        ("Return the answer as JSON.", False, WorkloadClass.STRUCTURED),
        (f"Rewrite this paragraph more formally: {LONG_TEXT}", False, WorkloadClass.EDIT),
        ("Fix it.", False, WorkloadClass.OPEN_ENDED),
    ],
)  # fmt: skip
def test_classify(prompt: str, wants_json: bool, expected: WorkloadClass) -> None:
    assert classify(prompt, wants_json) is expected


def test_the_header_overrides_the_workload_rule() -> None:
    assert decide("on", WorkloadClass.OPEN_ENDED, 1.5).route == "speculative"
    assert decide("off", WorkloadClass.STRUCTURED, 0.0).route == "plain"


def test_auto_speculates_where_output_copies_the_prompt() -> None:
    assert decide("auto", WorkloadClass.STRUCTURED, 0.0).route == "speculative"
    assert decide("auto", WorkloadClass.EDIT, None).route == "speculative"
    assert decide("auto", WorkloadClass.OPEN_ENDED, 0.0).route == "plain"
    assert decide("auto", WorkloadClass.CODE, 0.0).route == "plain"


def test_auto_skips_drafting_at_high_temperature() -> None:
    decision = decide("auto", WorkloadClass.STRUCTURED, 1.3)
    assert decision.route == "plain"
    assert "temperature" in decision.reason


@pytest.mark.parametrize("value", [None, "auto", "ON", " off "])
def test_header_values(value: str | None) -> None:
    assert parse_preference(value) in ("on", "off", "auto")


def test_a_bad_header_value_is_a_client_error() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_preference("sometimes")
    assert caught.value.param == "X-Speculative"
    assert caught.value.status_code == 400
