"""Worker-side changes for per-request draft length, loaded in vLLM's worker process.

vLLM imports this module there when an engine names `WORKER_EXTENSION_QUALNAME` as its
`worker_extension_cls`; the patches below apply at that import, to that process only.

- Requests whose draft length is 0 are not offered to the ngram proposer: matching their
  whole context every step would only produce drafts the scheduler then throws away.
- vLLM 0.32's top-k step fails on an empty batch of rows (`k.max()` of an empty tensor).
  The rejection sampler hands it one whenever no request in a step has drafts, the batch is
  not all greedy and a request sets top_k without top_p: with length-0 requests beside
  sampling ones that is common, and it killed the engine core.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.ops import topk_topp_sampler
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from app.engine.draft_length import draft_limit

WORKER_EXTENSION_QUALNAME = "app.engine.draft_worker.DraftWorkerExtension"


class DraftWorkerExtension:
    """Nothing to call: its module's import is what changes the worker."""


_top_k_only = topk_topp_sampler.apply_top_k_only


def _top_k_only_guarded(logits: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return logits if logits.shape[0] == 0 else _top_k_only(logits, k)


_propose = GPUModelRunner.propose_draft_token_ids


def _propose_within_limits(
    self: GPUModelRunner, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
) -> Any:
    config = self.speculative_config
    if config is None or config.method != "ngram" or not isinstance(sampled_token_ids, list):
        return _propose(self, scheduler_output, sampled_token_ids, *args, **kwargs)
    k = self.num_spec_tokens
    offered = list(sampled_token_ids)  # vLLM returns the original in the step's output
    for i, request_id in enumerate(self.input_batch.req_ids[: len(offered)]):
        state = self.requests.get(request_id)
        params = state.sampling_params if state is not None else None
        if params is not None and draft_limit(params.extra_args, k) == 0:
            offered[i] = []  # the ngram proposer skips requests that sampled nothing
    return _propose(self, scheduler_output, offered, *args, **kwargs)


topk_topp_sampler.apply_top_k_only = _top_k_only_guarded
GPUModelRunner.propose_draft_token_ids = _propose_within_limits  # type: ignore[method-assign]
