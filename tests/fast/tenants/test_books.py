"""A request's fair-share charge: its prompt and its expected output when it is admitted,
what it really used when it ends."""

from __future__ import annotations

import pytest

from app.engine.generation import SamplingOptions
from app.tenants.access import Access
from app.tenants.books import TenantBooks, UsageFigures, estimated_prompt_tokens
from app.tenants.fair_share import FIRST_EXPECTED_OUTPUT, FairShare
from app.tenants.keys import ApiKey, digest_of

PROMPT = "Write a short story about a pilot."  # its estimate: len // 4 + 1 tokens


def access(name: str) -> Access:
    return Access(ApiKey(name, digest_of(f"sk-{name}")))


def admit(books: TenantBooks, tenant: str, max_tokens: int | None, n: int = 1) -> object:
    charge = books.open(access(tenant), [PROMPT], SamplingOptions(max_tokens=max_tokens, n=n))
    books.admitted(charge)
    return charge


def test_admission_charges_the_prompt_and_the_expected_output() -> None:
    share = FairShare()
    books = TenantBooks(fair_share=share)
    prompt = estimated_prompt_tokens([PROMPT]) * share.costs.prompt
    admit(books, "a", max_tokens=48)
    assert share.counter("a") == pytest.approx(prompt + 48 * share.costs.output)
    # No max_tokens and no answers yet: the first guess, per sequence.
    admit(books, "b", max_tokens=None, n=2)
    assert share.counter("b") == pytest.approx(
        prompt + 2 * FIRST_EXPECTED_OUTPUT * share.costs.output
    )


def test_the_end_settles_to_what_it_used_and_teaches_the_expected_length() -> None:
    share = FairShare()
    books = TenantBooks(fair_share=share)
    charge = admit(books, "a", max_tokens=None)
    books.finished(charge, UsageFigures("r1", "stop", 30, 20, None))  # type: ignore[arg-type]
    assert share.counter("a") == pytest.approx(share.costs.of(30, 20, 0))
    # Its next request is expected to write about what the last did, not 256 tokens.
    assert share.expected_output("a", None) == pytest.approx(20)
    assert share.expected_output("a", 8) == 8
    assert share.expected_output("other", None) == FIRST_EXPECTED_OUTPUT


def test_a_flood_in_flight_is_counted_before_it_ends() -> None:
    # Tenant a has ten requests running, b none: the next slot must not go to a as if it
    # had been served nothing yet.
    share = FairShare()
    books = TenantBooks(fair_share=share)
    for _ in range(10):
        admit(books, "a", max_tokens=48)
    admit(books, "b", max_tokens=48)
    assert share.lowest(["a", "b"]) == "b"
    assert share.counter("a") == pytest.approx(10 * share.counter("b"))
