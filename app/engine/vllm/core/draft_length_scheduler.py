"""Per-request draft length inside one speculative vLLM engine, re-chosen every step.

A request may carry, in `SamplingParams.extra_args`, its own limit on draft tokens per step
(`DRAFT_LENGTH_KEY`, 0..K; 0 means it never drafts, so one speculative engine can serve both
routes) and an acceptance prior (`ACCEPTANCE_PRIOR_KEY`). With a prior, the length is not
fixed: each step the scheduler picks every such request's length in 0..limit for the
batch's goodput (app/drafting/length_rule.py), from the request's acceptance so far and the
engine's step times. Without one, the request verifies up to its limit every step.

vLLM builds `DraftLengthScheduler` in its engine core process when the engine schedules
synchronously (app/engine/vllm/core/scheduler_choice.py; under async scheduling,
app/engine/vllm/core/async_draft_length_scheduler.py); `WorkerExtension` is loaded in the
worker process (`worker_extension_cls`) and patches worker functions when its module is
imported there.

A request that never drafts samples as on a plain engine, so it may carry the sampling
fields vLLM 0.32 refuses on any speculative engine (`min_p`, `logit_bias`): the worker
builds their logits processors, and this module's import lets such requests past vLLM's
check, in whichever process imports it (the gateway's, where requests are checked).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from vllm.config import SpeculativeConfig, VllmConfig
from vllm.platforms import current_platform
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request

from app.drafting.draft_plan import DraftPlanner, Offer, Source
from app.drafting.length_rule import CPU_STEP_PRIOR, GPU_STEP_PRIOR, StepCostPrior
from app.engine.vllm.core.fair_waiting import FairWaiting
from app.engine.vllm.extra_args import (
    CONFIDENCE_ATTRIBUTE,
    PREDICTED_ATTRIBUTE,
    PREDICTION_ACCEPTED_KEY,
    STEP_COST_KEY,
    Confidence,
    acceptance_prior,
    draft_limit,
)

# Under "vllm", whose handlers the engine core process configures (it runs there).
logger = logging.getLogger("vllm.specgate.scheduler")

# How often the engine core logs its learned step-cost line (steps).
STEP_COST_LOG_EVERY = 500
# A request's drafts from its own prediction are assumed to land this share per position until
# they say otherwise: the client wrote the prediction as the answer it expects.
PREDICTION_PRIOR = 0.9
# A file to append every step's shape and time to, as JSON lines (for profiling).
STEP_TRACE = os.environ.get("SPECGATE_STEP_TRACE")


def platform_planner(additional_config: object = None) -> DraftPlanner:
    """A draft planner starting from this platform's step-cost prior, or held at the line
    the operator fixed (`STEP_COST_KEY` in vLLM's additional_config: --draft-step-cost)."""
    fixed = additional_config.get(STEP_COST_KEY) if isinstance(additional_config, dict) else None
    if fixed is not None:
        return DraftPlanner(StepCostPrior(*(float(term) for term in fixed)), fixed_step_cost=True)
    return DraftPlanner(CPU_STEP_PRIOR if current_platform.is_cpu() else GPU_STEP_PRIOR)


class DraftLengthScheduler(Scheduler):
    """vLLM's scheduler, with each request's proposed drafts cut to its length for the step.

    With async scheduling off (always so for ngram, and on CPUs), the engine core hands each
    step's proposals to `update_draft_token_ids`; what is left there is what gets verified,
    counted in the per-request metrics, and given KV slots. An empty list makes the step a
    plain one-token decode for that request. Proposals the rule leaves out are held, and
    checked against what the step produces, as evidence of the request's acceptance.
    """

    def __init__(self, vllm_config: VllmConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(vllm_config, *args, **kwargs)
        self.planner = platform_planner(vllm_config.additional_config)
        # Per request, every token proposed for the coming step, verified or held back, and
        # the drafter's confidence in each (and its match's length) where it gives one.
        self._proposed: dict[str, tuple[list[int], Confidence | None, bool, Source]] = {}
        # Per request that drafted from its prediction: how many of those drafts its answer
        # produced (OpenAI's accepted_prediction_tokens), handed out when it finishes.
        self._prediction_accepted: dict[str, int] = {}
        self._step_started: tuple[float, int, int, bool] | None = None
        self._trace: dict[str, float] = {}
        self.fair = FairWaiting()

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        self.fair.arrived(request, self.waiting)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self.fair.order(self.waiting)
        output = super().schedule(*args, **kwargs)
        self.fair.charge(output, self.requests)
        if output.total_num_scheduled_tokens:
            sequences = len(output.num_scheduled_tokens)
            drafting = bool(output.scheduled_spec_decode_tokens)
            self._step_started = (
                time.perf_counter(),
                sequences,
                output.total_num_scheduled_tokens,
                drafting,
            )
            if STEP_TRACE:
                self._trace = {
                    "t": round(time.time(), 3),
                    "sequences": sequences,
                    "tokens": output.total_num_scheduled_tokens,
                    "drafting": len(output.scheduled_spec_decode_tokens),
                    "draft_tokens": sum(map(len, output.scheduled_spec_decode_tokens.values())),
                    "new": len(output.scheduled_new_reqs),
                }
        return output

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> Any:
        if self._step_started is not None:
            started, sequences, tokens, drafting = self._step_started
            self._step_started = None
            ms = (time.perf_counter() - started) * 1000
            self.planner.observe_step(sequences, tokens, drafting, ms)
            if STEP_TRACE:
                produced = sum(map(len, model_runner_output.sampled_token_ids or ()))
                record = {**self._trace, "produced": produced, "ms": round(ms, 3)}
                with open(STEP_TRACE, "a") as trace:
                    trace.write(json.dumps(record) + "\n")
            step_cost = self.planner.step_cost
            if step_cost.samples % STEP_COST_LOG_EVERY == 0:
                logger.info(
                    "step cost line: %s; drafter confidence calibrated (per range of match"
                    " lengths, per tenth of probability: chance, observations): greedy %s,"
                    " sampled %s",
                    step_cost.snapshot(),
                    *(
                        [
                            [(round(chance, 3), round(seen)) for chance, seen in cells]
                            for cells in table.snapshot()
                        ]
                        for table in (self.planner.calibration, self.planner.sampled_calibration)
                    ),
                )
        self._learn_acceptance(model_runner_output)
        return super().update_from_output(scheduler_output, model_runner_output)

    def _learn_acceptance(self, model_runner_output: ModelRunnerOutput) -> None:
        sampled = model_runner_output.sampled_token_ids
        index = model_runner_output.req_id_to_index
        for request_id, (proposed, confidence, samples, source) in self._proposed.items():
            position = index.get(request_id)
            if position is not None and position < len(sampled):
                produced = list(sampled[position])
                probabilities, match = confidence if confidence else (None, 0)
                hits = self.planner.observe_drafts(
                    request_id, proposed, produced, probabilities, match, samples, source
                )
                if source == "prediction":
                    landed = self._prediction_accepted.get(request_id, 0)
                    self._prediction_accepted[request_id] = landed + self._kept(request_id, hits)
        self._proposed = {}

    def _kept(self, request_id: str, tokens: int) -> int:
        """Of a step's first `tokens` tokens, those within the request's max_tokens (the
        step may produce more than the request keeps)."""
        request = self.requests.get(request_id)
        if request is None:
            return 0
        return max(0, min(tokens, request.max_tokens - request.num_output_tokens))

    def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        kv_transfer_params, *rest = super()._free_request(request, *args, **kwargs)
        landed = self._prediction_accepted.pop(request.request_id, None)
        if landed is not None:
            # The one dict vLLM carries from the engine core to a request's last output.
            kv_transfer_params = {**(kv_transfer_params or {}), PREDICTION_ACCEPTED_KEY: landed}
        return (kv_transfer_params, *rest)

    def update_draft_token_ids(self, draft_token_ids: DraftTokenIds) -> None:
        k = self.num_spec_tokens
        proposals = draft_token_ids.draft_token_ids
        # A suffix drafter's per-token probabilities ride along
        # (app/engine/vllm/worker/drafting_patches.py).
        confidences = getattr(draft_token_ids, CONFIDENCE_ATTRIBUTE, None)
        predicted = getattr(draft_token_ids, PREDICTED_ATTRIBUTE, None)
        chosen: list[tuple[int, list[int]]] = []
        offers: list[Offer] = []
        for i, request_id in enumerate(draft_token_ids.req_ids):
            request = self.requests.get(request_id)
            if request is None or request.sampling_params is None:
                continue
            extra_args = request.sampling_params.extra_args
            offered = proposals[i][: draft_limit(extra_args, k)]
            confidence: Confidence | None = confidences[i] if confidences else None
            samples = is_sampled(request.sampling_params)
            source: Source = "prediction" if predicted and predicted[i] else "drafter"
            if proposals[i] and not request.is_prefill_chunk:
                self._proposed[request_id] = (list(proposals[i]), confidence, samples, source)
            chosen.append((i, offered))
            # The planner reads the probabilities of the tokens on offer only.
            probabilities, match = confidence or ((), 0)
            prior = acceptance_prior(extra_args)
            if source == "prediction" and prior is not None:
                prior = PREDICTION_PRIOR
            offers.append(
                Offer(
                    request_id,
                    len(offered),
                    prior,
                    tuple(probabilities) or None,
                    match,
                    samples,
                    source,
                )
            )
        lengths = self.planner.lengths(offers, len(self.running))
        for (i, offered), length in zip(chosen, lengths, strict=True):
            proposals[i] = offered[:length]
        super().update_draft_token_ids(draft_token_ids)
        self.planner.forget_all_but(self.requests)

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        # vLLM pads a request that enters with a single token left to compute (a one-token
        # prompt, or a resubmission whose prefix is cached) to the uniform 1+K verification
        # shape, with K placeholder drafts. For a request of a shorter length, or one whose
        # length is chosen per step (placeholders are never accepted), those rows are wasted
        # work; for one of length 0 they also move its token from the plain Sampler to the
        # rejection sampler's draft rows, where min_p and logit_bias do not act.
        # Placeholders beyond that go, before the step's token counts are committed.
        k = self.num_spec_tokens
        scheduled = scheduler_output.scheduled_spec_decode_tokens
        for request_id, drafts in list(scheduled.items()):
            request = self.requests.get(request_id)
            if request is None or request.sampling_params is None:
                continue
            extra_args = request.sampling_params.extra_args
            limit = draft_limit(extra_args, k)
            if acceptance_prior(extra_args) is not None and -1 in drafts:
                limit = 0
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


def is_sampled(params: SamplingParams) -> bool:
    """The request samples: a draft lands by the target's probability of each token."""
    return params.temperature > 0 and params.top_k != 1


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
