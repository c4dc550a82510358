"""Per-request draft length under vLLM's async scheduling (its GPU default for draft models,
EAGLE and GPU n-gram on one node).

Under async scheduling the engine core never hands the scheduler the drafter's proposals:
the worker keeps them, and the scheduler only reserves placeholders for the next step's
drafts (`AsyncScheduler._update_after_schedule`, one list of K for every request). The
worker then verifies, per request, as many drafts as placeholders were scheduled (vLLM
0.32's V1 GPU runner, `_prepare_input_ids`). So here each request's placeholders are cut to
its length: its own limit, or for a request with an acceptance prior, the goodput rule's
choice.

What is lost without the proposals: drafts the rule leaves out cannot be checked against
what the step produced, so a request learns its acceptance only from drafts it verified. An
adaptive request therefore verifies at least one draft every step (on a GPU a verified token
costs the step almost nothing), or it could never learn to draft again. Step times are the
intervals between finished steps: with two steps in flight, schedule() to
update_from_output() spans more than one.
"""

from __future__ import annotations

import time
from typing import Any

from vllm.config import VllmConfig
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from app.drafting.draft_plan import Offer
from app.engine.vllm.core.draft_length_scheduler import platform_planner
from app.engine.vllm.core.fair_waiting import FairWaiting
from app.engine.vllm.extra_args import acceptance_prior, draft_limit


class AsyncDraftLengthScheduler(AsyncScheduler):
    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(vllm_config, *args, **kwargs)
        self.planner = platform_planner(vllm_config.additional_config)
        self._last_step_done: float | None = None
        self.fair = FairWaiting()

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self.fair.arrived(request, self.waiting)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self.fair.order(self.waiting)
        output = super().schedule(*args, **kwargs)
        self.fair.charge(output, self.requests)
        return output

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        super()._update_after_schedule(scheduler_output)
        k = self.num_spec_tokens
        decoding = []
        offers = []
        for request_id in scheduler_output.num_scheduled_tokens:
            request = self.requests[request_id]
            if request.is_prefill_chunk or request.sampling_params is None:
                continue
            decoding.append(request)
            extra_args = request.sampling_params.extra_args
            prior = acceptance_prior(extra_args)
            offers.append(Offer(request.request_id, draft_limit(extra_args, k), prior))
        lengths = self.planner.lengths(offers, len(scheduler_output.num_scheduled_tokens))
        for request, offer, length in zip(decoding, offers, lengths, strict=True):
            if offer.prior is not None and offer.available:
                length = max(1, length)  # the only evidence left is a verified draft
            request.spec_token_ids = request.spec_token_ids[:length]

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> Any:
        done = time.perf_counter()
        if self._last_step_done is not None and scheduler_output.total_num_scheduled_tokens:
            self.planner.observe_step(
                len(scheduler_output.num_scheduled_tokens),
                scheduler_output.total_num_scheduled_tokens,
                bool(scheduler_output.scheduled_spec_decode_tokens),
                (done - self._last_step_done) * 1000,
            )
        self._last_step_done = done
        sampled = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        for request_id, drafts in scheduler_output.scheduled_spec_decode_tokens.items():
            position = index.get(request_id)
            if drafts and position is not None and position < len(sampled):
                accepted = max(0, len(sampled[position]) - 1)
                self.planner.observe_outcome(request_id, accepted, accepted < len(drafts))
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.planner.forget_all_but(self.requests)
        if not self.running:
            self._last_step_done = None  # an idle gap is no step's time
        return outputs
