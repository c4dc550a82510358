"""The model runner a speculative engine gets (V1, pinned), and what follows from it: what
the engine serves while drafting, and whether the draft replay runs. Platform facts are
faked: vLLM chooses V2 only where Triton is installed (CUDA hosts)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import vllm.config.vllm as vllm_config_module
from vllm.config import ModelConfig, VllmConfig

from app.drafters import NGRAM
from app.engine.generation import SamplingOptions
from app.engine.protocol import EngineFacts
from app.engine.refusals import drafting_refusal
from app.engine.vllm.model_runner import RUNNER_VARIABLE, pinned_runner, runner_of
from app.main import ngram_config
from app.settings import Settings
from tests.tiny_llama import tiny_llama_folder


@pytest.fixture
def cuda_like(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host where vLLM would pick Model Runner V2: Triton present, no operator choice."""
    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", True)
    monkeypatch.delenv(RUNNER_VARIABLE, raising=False)


def tiny_config(tmp_path: Path) -> VllmConfig:
    folder = tiny_llama_folder(tmp_path)
    model = ModelConfig(model=str(folder), skip_tokenizer_init=True, max_model_len=1024)
    return VllmConfig(model_config=model)


def test_a_speculative_engine_is_spawned_on_v1_where_vllm_would_pick_v2(
    tmp_path: Path, cuda_like: None
) -> None:
    config = tiny_config(tmp_path)
    assert config.use_v2_model_runner  # vLLM's own choice on such a host
    with pinned_runner(speculative=True):
        assert runner_of(config.use_v2_model_runner).runner == "v1"
    assert RUNNER_VARIABLE not in os.environ  # the gateway's environment is left as it was
    with pinned_runner(speculative=False):
        assert runner_of(config.use_v2_model_runner).runner == "v2"


def test_an_operators_explicit_runner_wins(
    tmp_path: Path, cuda_like: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNNER_VARIABLE, "1")
    config = tiny_config(tmp_path)
    with pinned_runner(speculative=True):
        assert runner_of(config.use_v2_model_runner).runner == "v2"
    assert os.environ[RUNNER_VARIABLE] == "1"


def test_what_a_drafting_request_may_carry_follows_the_runner() -> None:
    options = SamplingOptions(temperature=0.7, min_p=0.1, logit_bias={5: 1.0})
    v1, v2 = runner_of(False), runner_of(True)
    refused = drafting_refusal(options, v1.applies_sampling_fields_at_drafts)
    assert refused is not None and set(refused.fields) == {"min_p", "logit_bias"}
    assert drafting_refusal(options, v2.applies_sampling_fields_at_drafts) is None
    with_top_k = SamplingOptions(temperature=0.7, top_k=5)
    assert drafting_refusal(with_top_k, v2.applies_sampling_fields_at_drafts) is not None


def test_the_draft_replay_steps_aside_when_the_engine_runs_v2() -> None:
    def engine(use_v2: bool) -> SimpleNamespace:
        matches = runner_of(use_v2).draft_replay_matches
        facts = EngineFacts(2048, exposes_token_ids=True, draft_replay_matches=matches)
        return SimpleNamespace(facts=facts)

    settings = Settings(speculative_config=NGRAM)  # the replay is n-gram's
    assert ngram_config(settings, {"speculative": engine(False), "plain": engine(False)})
    assert ngram_config(settings, {"speculative": engine(True), "plain": engine(False)}) is None
