"""Greedy answers are the same whichever layout serves them: two engines or one."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from openai import OpenAI

from tests.engine.layout_answers import (
    TWO_LAYOUT_ANSWERS,
    Answers,
    agree_across_routes,
    answers,
    biased_token,
)
from tests.engine.server import ServerProcess
from tests.engine.test_conformance import tokenizer

__all__ = ["tokenizer"]


@pytest.fixture(scope="module")
def two_layout_answers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tokenizer: Any
) -> Answers:
    """What tests/engine's two-engine server answered in this session, or, when it did not
    run, a default (--engine-layout two) server's answers beside the package's server."""
    if TWO_LAYOUT_ANSWERS in request.config.stash:
        return request.config.stash[TWO_LAYOUT_ANSWERS]
    log = tmp_path_factory.mktemp("server_two") / "specgate.log"
    process = ServerProcess(["--engine-layout", "two", "--routing-exploration", "0"], log)
    try:
        process.wait_ready()
        client = OpenAI(base_url=f"{process.base_url}/v1", api_key="-", max_retries=0, timeout=300)
        return answers(client, biased_token(tokenizer))
    finally:
        process.stop(signal.SIGTERM)


def test_both_layouts_give_the_same_greedy_answers(
    sync_client: OpenAI, two_layout_answers: Answers, tokenizer: Any
) -> None:
    one = answers(sync_client, biased_token(tokenizer))
    assert one == two_layout_answers
    assert agree_across_routes(one), one
