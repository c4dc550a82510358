"""Worker-side changes for per-request draft length, installed in vLLM's worker process.

`install()` applies them; importing this module changes nothing. vLLM imports
app/engine/vllm/worker/extension.py in the worker when an engine names it as its
`worker_extension_cls`, and that module calls `install()`, so the patches reach the worker
process only. Each passes through on an engine that does not draft.

- Requests whose draft length is 0 are not offered to the ngram proposer: matching their
  whole context every step would only produce drafts the scheduler then throws away.
- With suffix decoding, the runner's proposer is replaced, on its first step, by one that keeps
  the tree of earlier answers per tenant (app/engine/vllm/worker/suffix_drafter.py), and the
  drafts the worker hands the scheduler carry the drafter's probability for each token, which the
  length rule prices positions by (app/drafting/confidence.py).
- A request that brought a prediction of its answer drafts from it where it proposes
  anything (app/engine/vllm/worker/prediction_drafter.py), on n-gram and suffix engines.
- A step in which no request has drafts samples as a plain engine does. vLLM 0.32 sends
  every step of a speculative engine through its rejection sampler, which for such a step
  only adds work (a profile of length-0 requests put it at about 3 % of their time), and
  whose top-k step fails on the empty batch of draft rows: a sampled request with top_k and
  no top_p, in a step with no drafts, killed the engine core. With length-0 requests beside
  others such steps are common.
- On CPUs the rejection sampler draws its recovery noise only for requests that drafted
  (`_sample_recovered_tokens_for_drafting_rows`); vLLM draws it for the whole batch.
- On CPUs the rejection sampler's per-draft-row temperature, top-k and top-p are expanded in
  PyTorch. vLLM 0.32's C++ stand-in for that Triton kernel (`_expand_kernel_impl`,
  vllm/utils/cpu_triton_utils.py) fills an int64 copy of its output and never copies it back,
  so the rows keep whatever `new_empty` held. In a step with drafts and any sampled request,
  every draft row's logits were divided by that garbage: greedy drafting requests came out
  as noise, and under a grammar a masked token could win ("grammar rejected tokens").
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.platforms import current_platform
from vllm.v1.sample import rejection_sampler
from vllm.v1.sample.logits_processor import BUILTIN_LOGITS_PROCESSORS, LogitsProcessors
from vllm.v1.worker import gpu_model_runner
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from app.engine.vllm.extra_args import CONFIDENCE_ATTRIBUTE, PREDICTED_ATTRIBUTE, draft_limit
from app.engine.vllm.worker.prediction_drafter import predictions_of

_sample = GPUModelRunner._sample


def _sample_plainly_without_drafts(
    self: GPUModelRunner, logits: Any, spec_decode_metadata: Any
) -> Any:
    if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
        # One logits row per request, as on a plain engine: the plain sampler's output has
        # the shape the bookkeeping expects when nothing was drafted.
        spec_decode_metadata = None
    return _sample(self, logits, spec_decode_metadata)


_propose = GPUModelRunner.propose_draft_token_ids


def _propose_within_limits(
    self: GPUModelRunner, scheduler_output: Any, sampled_token_ids: Any, *args: Any, **kwargs: Any
) -> Any:
    config = self.speculative_config
    if config is not None and config.method == "suffix":
        _keep_trees_per_tenant(self)
    if config is None or not isinstance(sampled_token_ids, list):
        return _propose(self, scheduler_output, sampled_token_ids, *args, **kwargs)
    offered = sampled_token_ids
    if config.method == "ngram":
        k = self.num_spec_tokens
        offered = list(sampled_token_ids)  # vLLM returns the original in the step's output
        for i, request_id in enumerate(self.input_batch.req_ids[: len(offered)]):
            state = self.requests.get(request_id)
            params = state.sampling_params if state is not None else None
            if params is not None and draft_limit(params.extra_args, k) == 0:
                offered[i] = []  # the ngram proposer skips requests that sampled nothing
    drafts = _propose(self, scheduler_output, offered, *args, **kwargs)
    if isinstance(drafts, list):
        predictions_of(self).replace_drafts(self, sampled_token_ids, drafts)
    return drafts


def _keep_trees_per_tenant(runner: GPUModelRunner) -> None:
    # Imported here: arctic-inference is loaded only by engines that draft with it.
    from app.engine.vllm.worker.suffix_drafter import TenantSuffixDrafter

    if not isinstance(runner.drafter, TenantSuffixDrafter):
        runner.drafter = TenantSuffixDrafter(runner.vllm_config, runner.requests)


_take_draft_token_ids = GPUModelRunner.take_draft_token_ids


def _take_draft_token_ids_with_confidence(self: GPUModelRunner) -> Any:
    drafts = _take_draft_token_ids(self)
    if drafts is None:
        return None
    predicted = predictions_of(self).predicted
    # Only specgate's suffix drafter keeps the last step's confidence (suffix_drafter.py);
    # it says nothing of a draft that came from the request's prediction.
    confidence = getattr(getattr(self, "drafter", None), "confidence", None)
    # Pickled with the object to the engine core, where the scheduler reads them.
    if isinstance(confidence, dict):
        setattr(
            drafts,
            CONFIDENCE_ATTRIBUTE,
            [None if r in predicted else confidence.get(r) for r in drafts.req_ids],
        )
    if predicted:
        setattr(drafts, PREDICTED_ATTRIBUTE, [r in predicted for r in drafts.req_ids])
    return drafts


_build_logitsprocs = gpu_model_runner.build_logitsprocs  # type: ignore[attr-defined]


def _build_with_builtins(
    vllm_config: Any,
    device: Any,
    is_pin_memory: bool,
    is_pooling_model: bool,
    custom_logitsprocs: Any = (),
) -> LogitsProcessors:
    if vllm_config.speculative_config is None or is_pooling_model or custom_logitsprocs:
        return _build_logitsprocs(
            vllm_config, device, is_pin_memory, is_pooling_model, custom_logitsprocs
        )
    return LogitsProcessors(
        processor(vllm_config, device, is_pin_memory) for processor in BUILTIN_LOGITS_PROCESSORS
    )


def _expand_batch_to_tokens(
    x: torch.Tensor,
    cu_num_tokens: torch.Tensor,
    num_tokens: int,
    replace_from: int = 0,
    replace_to: int = 0,
) -> torch.Tensor:
    """Each request's value once per draft row (x[i] repeated for its drafts), as vLLM's kernel."""
    counts = torch.diff(cu_num_tokens, prepend=cu_num_tokens.new_zeros(1))
    values = torch.where(x == replace_from, replace_to, x).to(x.dtype)
    return values.repeat_interleave(counts.long(), output_size=num_tokens)


def _sample_recovered_tokens_for_drafting_rows(
    max_spec_len: int,
    num_draft_tokens: list[int],
    cu_num_draft_tokens: torch.Tensor,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    sampling_metadata: Any,
    device: torch.device,
    use_fp64_gumbel: bool = False,
) -> torch.Tensor:
    """vLLM's `sample_recovered_tokens`, with the noise drawn only for requests that drafted.

    vLLM draws a vocabulary's worth of exponential noise (and its reciprocal) for every
    request of the step, drafting or not, though its kernel reads only the rows of requests
    with drafts. On a CPU that is the speculative path's main cost for a batch where few
    requests draft: 20 sequences, one drafting 5 tokens, took 107 ms a step against 68
    without drafts (bench/RESULTS.md). A request with its own seed draws from its generator
    exactly as in vLLM (and, as there, only when it drafted), so seeded answers are unchanged.
    """
    dtype = torch.float64 if use_fp64_gumbel else torch.float32
    inv_q = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=dtype, device=device)
    generators = sampling_metadata.generators
    for row, drafted in enumerate(num_draft_tokens):
        if drafted:
            inv_q[row].exponential_(generator=generators.get(row)).reciprocal_()
    recovered = torch.empty_like(draft_token_ids)
    rejection_sampler._sample_recovered_tokens(
        recovered,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        inv_q,
        max_spec_len=max_spec_len,
    )
    return recovered


def install() -> None:
    """Patch vLLM's runner, its logits processors and (on CPUs) the rejection sampler's
    expansion and recovery noise, in this process. Twice is the same as once: each wraps
    the saved original."""
    GPUModelRunner._sample = _sample_plainly_without_drafts  # type: ignore[method-assign]
    GPUModelRunner.propose_draft_token_ids = _propose_within_limits  # type: ignore[method-assign]
    GPUModelRunner.take_draft_token_ids = _take_draft_token_ids_with_confidence  # type: ignore[method-assign]
    gpu_model_runner.build_logitsprocs = _build_with_builtins  # type: ignore[attr-defined]
    if current_platform.is_cpu():
        rejection_sampler.expand_batch_to_tokens = _expand_batch_to_tokens
        # On GPUs one batched draw is cheap, and a launch per drafting row would not be.
        rejection_sampler.sample_recovered_tokens = _sample_recovered_tokens_for_drafting_rows
