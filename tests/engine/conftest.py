"""Real-engine tests: one specgate server on the embedded default, shared by this package."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import astuple
from pathlib import Path

import pytest
from openai import AsyncOpenAI, OpenAI

from app.drafters import NGRAM
from app.drafting.length_rule import CPU_STEP_PRIOR
from app.embedded_model import MODEL_NAME
from app.settings import Settings
from tests.engine.server import ServerProcess, package_server

MAX_RUNNING, MAX_QUEUED = 2, 2
# A queued request waits as long as the machine needs (the default 30 s queue timeout cut
# queued streams with a 503 beside a busy core); the 503 itself is tests/fast/test_admission.py's.
ADMISSION_ARGS = [
    "--max-running-requests",
    str(MAX_RUNNING),
    "--max-queued-requests",
    str(MAX_QUEUED),
    "--queue-timeout-seconds",
    "600",
]

# These tests were written for n-gram prompt lookup's drafts (copies of the prompt): they
# name it, whatever the default drafter (app/drafters.py).
NGRAM_ARGS = ("--speculative-config", json.dumps(NGRAM))

# --draft-step-cost holding the CPU prior's step-cost line: what `auto` drafts then depends
# on acceptance and the batch alone, not on how busy the machine is (a line learned on a
# machine that others' work slows made a poem draft half its replay there).
HELD_CPU_STEP_COST = ("--draft-step-cost", ",".join(str(t) for t in astuple(CPU_STEP_PRIOR)))


# Package scope: the server stops when tests/engine ends, before tests/draft_model starts
# its own (two at once do not fit in these machines' memory).
@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server") / "specgate.log"
    # No exploration: auto routing must be reproducible here. Small admission limits, so
    # that test_load.py can push far past them.
    with package_server(
        ["--engine-layout", "two", *NGRAM_ARGS, "--routing-exploration", "0", *ADMISSION_ARGS],
        log,
    ) as process:
        yield process


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return Settings().cache_dir / "models" / MODEL_NAME


@pytest.fixture
def sync_client(server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture
def async_client(server: ServerProcess) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=300
    )
