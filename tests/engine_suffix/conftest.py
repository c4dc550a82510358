"""Real-engine tests of suffix decoding (`"method": "suffix"`, arctic-inference) in one
engine, with API keys: whose earlier answers each request may draft from."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from tests.engine.conftest import HELD_CPU_STEP_COST, model_dir
from tests.engine.server import ServerProcess, package_server

__all__ = ["model_dir"]

KEYS = ("sk-tenant-a", "sk-tenant-b")


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server_suffix") / "specgate.log"
    # The line is held: what `auto` drafts here depends on the drafter's confidence.
    args = [
        "--engine-layout", "one",
        "--speculative-config", json.dumps({"method": "suffix", "num_speculative_tokens": 8}),
        "--routing-exploration", "0",
        *HELD_CPU_STEP_COST,
        "--api-key", ",".join(KEYS),
    ]  # fmt: skip
    with package_server(args, log) as process:
        yield process


def client_for(server: ServerProcess, key: str) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0, timeout=300)
