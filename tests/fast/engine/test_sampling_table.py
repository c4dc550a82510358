"""One table maps SamplingOptions to vLLM: every field reaches the embedded engine and the
remote wire (or is refused there by name)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.engine.generation import SamplingOptions
from app.engine.sampling_table import engine_sampling, finish_reason, remote_sampling
from app.engine.vllm.vllm_engine import VllmEngine
from app.errors import EngineFailureError

# A value other than the default for every SamplingOptions field. A new field fails the first
# test below until it is listed here, and the others until the table carries it.
CHANGED: dict[str, Any] = {
    "max_tokens": 9,
    "temperature": 0.3,
    "top_p": 0.8,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.25,
    "stop": ("\n",),
    "seed": 11,
    "n": 2,
    "json_schema": {"type": "object"},
    "top_k": 5,
    "min_p": 0.1,
    "repetition_penalty": 1.1,
    "logit_bias": {7: 2.0},
    "ignore_eos": True,
    "logprobs": 2,
    "echo": True,
    "default_max_tokens": 100,
}
# Refused on a remote route instead (see test_remote_http.py and engine.capabilities).
NOT_FORWARDED = {"logprobs", "echo"}


def test_every_sampling_option_has_a_changed_value_here() -> None:
    assert set(CHANGED) == {field.name for field in dataclasses.fields(SamplingOptions)}


def changed(name: str) -> SamplingOptions:
    # echo shows in vLLM's parameters as the prompt's logprobs, which need logprobs.
    extra = {"logprobs": 1} if name == "echo" else {}
    return SamplingOptions(**{name: CHANGED[name], **extra})


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_every_sampling_option_reaches_the_engine(name: str) -> None:
    baseline = SamplingOptions(logprobs=1) if name == "echo" else SamplingOptions()
    assert engine_sampling(changed(name)) != engine_sampling(baseline)


@pytest.mark.parametrize("name", sorted(set(CHANGED) - NOT_FORWARDED))
def test_every_forwarded_option_reaches_the_upstream(name: str) -> None:
    assert remote_sampling(changed(name)) != remote_sampling(SamplingOptions())


def test_the_remote_wire_uses_vllm_names_and_the_embedded_engine_defaults() -> None:
    assert remote_sampling(SamplingOptions()) == {
        "n": 1,
        "max_tokens": None,
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "stop": [],
    }
    fields = remote_sampling(SamplingOptions(**CHANGED))
    assert fields["logit_bias"] == {"7": 2.0}
    assert fields["stop"] == ["\n"]
    assert fields["seed"] == 11
    assert fields["structured_outputs"] == {"json": {"type": "object"}}
    assert not {"logprobs", "prompt_logprobs", "echo"} & set(fields)
    assert remote_sampling(SamplingOptions(json_schema={}))["structured_outputs"] == {
        "json_object": True
    }


def test_the_engine_gets_vllm_sampling_params_with_its_off_values() -> None:
    params = VllmEngine._sampling_params(SamplingOptions())
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (1.0, 1.0, 0, 0.0)
    assert params.repetition_penalty == 1.0 and params.structured_outputs is None
    params = VllmEngine._sampling_params(SamplingOptions(**CHANGED))
    assert params.logit_bias == {7: 2.0} and params.prompt_logprobs == 2
    assert params.structured_outputs is not None and params.structured_outputs.json == {
        "type": "object"
    }


def test_finish_reasons() -> None:
    assert [finish_reason(r) for r in (None, "stop", "length", "abort", "tool_calls")] == [
        None,
        "stop",
        "length",
        "abort",
        "stop",
    ]
    with pytest.raises(EngineFailureError, match="the upstream engine failed"):
        finish_reason("error", "the upstream engine")
