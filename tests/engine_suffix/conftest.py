"""Real-engine tests of suffix decoding (`"method": "suffix"`, arctic-inference) in one
engine, with API keys: whose earlier answers each request may draft from."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import astuple

import pytest
from openai import OpenAI

from app.routing.goodput import CPU_STEP_PRIOR
from tests.engine.conftest import model_dir
from tests.engine.server import ServerProcess, package_server

__all__ = ["model_dir"]

KEYS = ("sk-tenant-a", "sk-tenant-b")


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server_suffix") / "specgate.log"
    # The CPU prior's step-cost line, held: what `auto` drafts here depends on the drafter's
    # confidence and the batch alone, not on how busy the machine is (tests/engine_one too).
    step_cost = ",".join(str(term) for term in astuple(CPU_STEP_PRIOR))
    args = [
        "--engine-layout", "one",
        "--speculative-config", json.dumps({"method": "suffix", "num_speculative_tokens": 8}),
        "--routing-exploration", "0",
        "--draft-step-cost", step_cost,
        "--api-key", ",".join(KEYS),
    ]  # fmt: skip
    with package_server(args, log) as process:
        yield process


def client_for(server: ServerProcess, key: str) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0, timeout=300)
