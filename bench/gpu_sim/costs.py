"""What a step of a vLLM engine costs on an NVIDIA GPU, from aiconfigurator-core's per-operation
times measured for vLLM (simulated: nothing here ran on a GPU).

A verification step where sequence i checks q_i = 1 + k_i tokens is priced as the
non-attention operations (GEMMs, norms, the LM head) at sum(q_i) tokens plus the attention
at the batch's sequences and context: a verified draft token costs what a decoded token
costs, except that it reads no KV of its own. aiconfigurator's built-in `nextn=K` prices the
attention as if each verified token were its own sequence; `upper_bound=True` prices it that
way, the pessimistic end of the range.

Every figure is memoized on a grid (token counts and contexts rounded), so a scenario of a
hundred thousand steps calls aiconfigurator a few thousand times at most.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

ATTENTION = "generation_attention"
LOGITS = "generation_logits_gemm"
EMBEDDING = "generation_embedding"
BACKEND = "vllm"
CONTEXT_BUCKET = 256  # contexts are priced at the next multiple of this


def aiconfigurator_version() -> str:
    return version("aiconfigurator-core")


def _bucket_tokens(tokens: int) -> int:
    """Exact up to 64, then about 3 % steps: GEMM times are smooth in the token count."""
    if tokens <= 64:
        return max(1, tokens)
    step = 1 << max(0, tokens.bit_length() - 6)
    return (tokens + step - 1) // step * step


def _bucket_context(context: int) -> int:
    return max(CONTEXT_BUCKET, (context + CONTEXT_BUCKET - 1) // CONTEXT_BUCKET * CONTEXT_BUCKET)


@dataclass(frozen=True)
class ModelShape:
    """What the KV capacity and the drafter prices need of a model's config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def read(cls, config_path: Path) -> ModelShape:
        config: dict[str, Any] = json.loads(config_path.read_text())
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            layers=int(config["num_hidden_layers"]),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        )

    def parameters(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (attention + mlp) + embeddings

    def kv_bytes_per_token(self, tp: int, dtype_bytes: int = 2) -> float:
        """KV cache bytes one token takes on each of `tp` GPUs (K and V, every layer)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes / tp


def bundled_config(model: str) -> Path:
    """aiconfigurator's copy of a Hugging Face config.json, e.g. meta-llama/Meta-Llama-3.1-8B."""
    import aiconfigurator_core

    folder = Path(aiconfigurator_core.__file__).parent / "model_configs"
    return folder / f"{model.replace('/', '--')}_config.json"


def system_memory_bytes(system: str) -> int:
    import aiconfigurator_core
    import yaml

    path = Path(aiconfigurator_core.__file__).parent / "systems" / f"{system}.yaml"
    spec = yaml.safe_load(path.read_text())
    return int(spec["gpu"]["mem_capacity"])


class StepPricer:
    """One model at one tensor-parallel size on one GPU type, priced per step."""

    def __init__(self, model: str, system: str, tp: int) -> None:
        from aiconfigurator_core.sdk.engine import EngineHandle

        # aiconfigurator logs every fallback table it loads; the source is given in reports.
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        self.model, self.system, self.tp = model, system, tp
        self._handle = EngineHandle.compile(model, system, BACKEND, tp_size=tp)
        # Memoized per instance (the handle is not hashable): grid points only.
        self._ops = lru_cache(maxsize=None)(self._ops_uncached)
        self._mixed = lru_cache(maxsize=None)(self._mixed_uncached)

    def _ops_uncached(self, sequences: int, context: int) -> dict[str, float]:
        return {op[0]: op[1] for op in self._handle.decode_step_per_op(sequences, context, 2)}

    def _mixed_uncached(self, prefill: int, decodes: int, context: int) -> tuple[float, float]:
        """(non-attention ms of the prefill's tokens, the prefill's attention ms)."""
        _, shared, prefill_attention, _ = self._handle.mixed_step_breakdown(prefill, 0, context, 2)
        return shared, prefill_attention

    def _decode_ops(self, sequences: int, context: int) -> dict[str, float]:
        return self._ops(_bucket_tokens(sequences), _bucket_context(context))

    def non_attention_ms(self, tokens: int) -> float:
        """GEMMs, norms, activations and the LM head for `tokens` tokens decoded or verified."""
        ops = self._decode_ops(tokens, CONTEXT_BUCKET)
        return sum(ms for name, ms in ops.items() if name != ATTENTION)

    def attention_ms(self, sequences: int, context: int) -> float:
        return self._decode_ops(sequences, context)[ATTENTION]

    def prefill_ms(self, tokens: int, context: int) -> float:
        """A prefill chunk of `tokens` tokens whose prompt reaches `context` tokens."""
        shared, attention = self._mixed(
            _bucket_tokens(tokens), 0, _bucket_context(max(context, tokens))
        )
        return shared + attention

    def step_ms(
        self, sequences: int, verified_tokens: int, context: int, upper_bound: bool = False
    ) -> float:
        """A decode step: `sequences` sequences verifying `verified_tokens` tokens in all
        (one each, plus drafts) at a mean context of `context` tokens."""
        if not sequences:
            return 0.0
        attended = verified_tokens if upper_bound else sequences
        return self.non_attention_ms(verified_tokens) + self.attention_ms(attended, context)

    def head_ms(self, sequences: int, context: int) -> float:
        """One decoder layer plus the LM head for `sequences` tokens: an EAGLE-like head's
        price for drafting one token per sequence."""
        ops = self._decode_ops(sequences, context)
        layers = sum(ms for name, ms in ops.items() if name not in (LOGITS, EMBEDDING))
        return layers / self.shape.layers + ops[LOGITS] + ops[EMBEDDING]

    @property
    def shape(self) -> ModelShape:
        return _shape(self.model)


@cache
def _shape(model: str) -> ModelShape:
    path = Path(model) / "config.json" if Path(model).is_dir() else bundled_config(model)
    return ModelShape.read(path)
