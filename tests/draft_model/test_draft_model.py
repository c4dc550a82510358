"""The draft-model path: a speculative engine with a separate draft that shares the tokenizer.

Runs its own server (the shared one is package-scoped to tests/engine and is stopped by
then: two servers at once would not fit these machines' memory). It also checks that
SIGINT, like SIGTERM for the shared server, leaves no engine process behind.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from openai import OpenAI

from app.embedded_model import prepare_embedded_model
from app.settings import Settings
from bench.model_folders import make_truncated_draft
from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess

DRAFT_TOKENS = 3


@pytest.fixture(scope="module")
def draft_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    target = prepare_embedded_model(Settings().cache_dir / "models")
    draft = make_truncated_draft(target, tmp_path_factory.mktemp("draft") / "smollm2-2-layers")
    process = ServerProcess(
        [
            "--speculative-model", str(draft),
            "--num-speculative-tokens", str(DRAFT_TOKENS),
            "--kv-cache-memory-bytes", str(256 * 1024 * 1024),
            "--max-model-len", "2048",
            "--routing-exploration", "0",
            # One engine for both routes, as the default: `off` is draft length 0 on the
            # draft model's engine (the two-engine layout: make gpu-check on a GPU host).
            "--engine-layout", "one",
        ],
        tmp_path_factory.mktemp("draft-server") / "specgate.log",
    )  # fmt: skip
    process.wait_ready()
    yield process
    process.stop(signal.SIGKILL)  # only reached if the SIGINT test did not run


@pytest.fixture
def client(draft_server: ServerProcess) -> OpenAI:
    return OpenAI(base_url=f"{draft_server.base_url}/v1", api_key="-", max_retries=0, timeout=300)


def test_the_draft_model_engine_matches_the_plain_engine(client: OpenAI) -> None:
    texts = {}
    for header in ("on", "off"):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=CODE, max_tokens=24, temperature=0,  # type: ignore[arg-type]
            extra_headers={"X-Speculative": header},
        )  # fmt: skip
        completion = raw.parse()
        texts[raw.headers["x-specgate-route"]] = completion.choices[0].message.content
        if header == "on":
            assert completion.usage is not None
            spec = completion.usage.model_extra["speculative_decoding"]  # type: ignore[index]
            # Every step drafts K tokens with a draft model, accepted or not.
            assert spec["draft_tokens"] == DRAFT_TOKENS * spec["drafts"] > 0
            assert 0 <= spec["accepted_tokens"] <= spec["draft_tokens"]
    assert texts["speculative"] and texts["speculative"] == texts["plain"]


def test_sigint_stops_every_engine_process(draft_server: ServerProcess) -> None:
    engine_processes = draft_server.descendants()
    assert any(
        "EngineCore" in " ".join(p.cmdline()) or "VLLM" in p.name() for p in engine_processes
    )
    survivors = draft_server.stop(signal.SIGINT)
    assert draft_server.process.returncode in (0, 130), draft_server.log_tail()
    assert "Application shutdown complete" in draft_server.log_tail()
    assert survivors == []
