"""Per-request draft length inside one speculative vLLM engine.

A request may carry its own limit on draft tokens per step, 0..K, in
`SamplingParams.extra_args[DRAFT_LENGTH_KEY]`; 0 means it never drafts, so one speculative
engine can serve both routes. vLLM loads `DraftLengthScheduler` in its engine core process
by qualified name (`scheduler_cls`); `DraftWorkerExtension` is loaded in the worker process
(`worker_extension_cls`) and patches worker functions when its module is imported there.

A request that never drafts samples as on a plain engine, so it may carry the sampling
fields vLLM 0.32 refuses on any speculative engine (`min_p`, `logit_bias`): the worker
builds their logits processors, and this module's import lets such requests past vLLM's
check, in whichever process imports it (the gateway's, where requests are checked).
"""

from __future__ import annotations

from typing import Any

from vllm.config import SpeculativeConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import DraftTokenIds

DRAFT_LENGTH_KEY = "specgate_draft_length"
SCHEDULER_QUALNAME = "app.engine.draft_length.DraftLengthScheduler"


def draft_limit(extra_args: dict[str, Any] | None, k: int) -> int:
    """The most draft tokens a request may verify per step: its own limit, within 0..k."""
    value = extra_args.get(DRAFT_LENGTH_KEY) if extra_args else None
    return k if value is None else max(0, min(int(value), k))


class DraftLengthScheduler(Scheduler):
    """vLLM's scheduler, with each request's proposed drafts cut to the request's limit.

    With async scheduling off (always so for ngram, and on CPUs), the engine core hands each
    step's proposals to `update_draft_token_ids`; what is left there is what gets verified,
    counted in the per-request metrics, and given KV slots. An empty list makes the step a
    plain one-token decode for that request.
    """

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        k = self.num_spec_tokens
        proposals = draft_token_ids.draft_token_ids
        for i, request_id in enumerate(draft_token_ids.req_ids):
            request = self.requests.get(request_id)
            if request is None or request.sampling_params is None:
                continue
            limit = draft_limit(request.sampling_params.extra_args, k)
            if len(proposals[i]) > limit:
                proposals[i] = proposals[i][:limit]
        super().update_draft_token_ids(draft_token_ids)

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        # vLLM pads a request that enters with a single token left to compute (a one-token
        # prompt, or a resubmission whose prefix is cached, as a move in this layout is)
        # to the uniform 1+K verification shape, with K placeholder drafts. For a request of
        # a shorter length those rows are wasted work; for one of length 0 they also move
        # its token from the plain Sampler to the rejection sampler's draft rows, where
        # min_p and logit_bias do not act. Placeholders beyond the request's length go,
        # before the step's token counts are committed.
        k = self.num_spec_tokens
        scheduled = scheduler_output.scheduled_spec_decode_tokens
        for request_id, drafts in list(scheduled.items()):
            request = self.requests.get(request_id)
            if request is None or request.sampling_params is None:
                continue
            limit = draft_limit(request.sampling_params.extra_args, k)
            excess = len(drafts) - limit
            if excess <= 0:
                continue
            if limit:
                scheduled[request_id] = drafts[:limit]
            else:
                del scheduled[request_id]
            scheduler_output.num_scheduled_tokens[request_id] -= excess
            scheduler_output.total_num_scheduled_tokens -= excess
        super()._update_after_schedule(scheduler_output)


def never_drafts(extra_args: dict[str, Any] | None) -> bool:
    return draft_limit(extra_args, 1) == 0


_validate_spec_decode = SamplingParams._validate_spec_decode


def _validate_spec_decode_unless_never_drafting(
    self: SamplingParams, config: SpeculativeConfig | None
) -> None:
    # vLLM refuses min_p and logit_bias on a speculative engine because its rejection
    # sampler does not apply them at draft positions. A request of draft length 0 has none:
    # its one token per step comes from vLLM's plain Sampler (as the bonus token when others
    # draft in the same step), which applies every logits processor the worker builds.
    if not never_drafts(self.extra_args):
        _validate_spec_decode(self, config)


SamplingParams._validate_spec_decode = _validate_spec_decode_unless_never_drafting  # type: ignore[method-assign,assignment]
