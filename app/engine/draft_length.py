"""Per-request draft length inside one speculative vLLM engine.

A request may carry its own limit on draft tokens per step, 0..K, in
`SamplingParams.extra_args[DRAFT_LENGTH_KEY]`; 0 means it never drafts, so one speculative
engine can serve both routes. vLLM loads `DraftLengthScheduler` in its engine core process
by qualified name (`scheduler_cls`); `DraftWorkerExtension` is loaded in the worker process
(`worker_extension_cls`) and patches two worker functions when its module is imported there.
"""

from __future__ import annotations

from typing import Any

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
