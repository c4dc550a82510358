"""Greedy answers of the two-engine layout, checked here and kept for tests/engine_one."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.engine.layout_answers import (
    TWO_LAYOUT_ANSWERS,
    agree_across_routes,
    answers,
    biased_token,
)
from tests.engine.test_conformance import tokenizer

__all__ = ["tokenizer"]


def test_greedy_answers_agree_across_routes_in_two_engines(
    sync_client: OpenAI, tokenizer: Any, request: pytest.FixtureRequest
) -> None:
    texts = answers(sync_client, biased_token(tokenizer))
    assert agree_across_routes(texts), texts
    request.config.stash[TWO_LAYOUT_ANSWERS] = texts
