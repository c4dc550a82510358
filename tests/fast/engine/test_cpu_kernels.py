"""The one-pass RMSNorm kernels (app/engine/vllm/worker/cpu_kernels.py) against vLLM's reference, on
the real kernels of vLLM's CPU extension. Starts no engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.layernorm import RMSNorm

from app.engine.vllm.worker import cpu_kernels

HIDDEN = 576  # the embedded model's


def build(**kwargs: object) -> RMSNorm:
    # vLLM builds its layers under an engine's config; a default one will do here.
    with set_current_vllm_config(VllmConfig()):
        layer = RMSNorm(HIDDEN, eps=1e-5, **kwargs)  # type: ignore[arg-type]
    with torch.no_grad():
        layer.weight.copy_(torch.rand(HIDDEN) + 0.5)
    return layer


@pytest.fixture
def norm() -> Iterator[RMSNorm]:
    yield build()


def reference(norm: RMSNorm, x: torch.Tensor, residual: torch.Tensor | None = None) -> object:
    return norm.forward_native(x.clone(), None if residual is None else residual.clone())


@pytest.mark.parametrize("tokens", [1, 24, 300])
def test_the_one_pass_norm_is_the_reference(norm: RMSNorm, tokens: int) -> None:
    x = torch.randn(tokens, HIDDEN) * 3
    fused = cpu_kernels._rms_norm_in_one_pass(norm, x.clone())
    assert isinstance(fused, torch.Tensor)
    torch.testing.assert_close(fused, reference(norm, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens", [1, 24, 300])
def test_the_one_pass_add_and_norm_is_the_reference(norm: RMSNorm, tokens: int) -> None:
    x, residual = torch.randn(tokens, HIDDEN), torch.randn(tokens, HIDDEN)
    expected_out, expected_residual = reference(norm, x, residual)  # type: ignore[misc]
    out, new_residual = cpu_kernels._rms_norm_in_one_pass(norm, x.clone(), residual.clone())
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    # The sum is exact in either: the next layer's residual must not drift.
    assert torch.equal(new_residual, expected_residual)


def test_inputs_the_kernel_does_not_take_keep_the_reference(norm: RMSNorm) -> None:
    strided = torch.randn(HIDDEN, 8).t()  # a view whose rows are not contiguous
    assert not strided.is_contiguous()
    torch.testing.assert_close(
        cpu_kernels._rms_norm_in_one_pass(norm, strided), reference(norm, strided)
    )
    partial = build(var_hidden_size=HIDDEN // 2)
    x = torch.randn(4, HIDDEN)
    torch.testing.assert_close(cpu_kernels._rms_norm_in_one_pass(partial, x), reference(partial, x))


def test_the_reference_can_be_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_kernels.VARIABLE, "reference")
    assert not cpu_kernels.enabled()
    monkeypatch.setenv(cpu_kernels.VARIABLE, "fused")
    assert cpu_kernels.enabled()  # the fast tier runs on CPUs
