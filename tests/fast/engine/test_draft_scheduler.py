"""DraftLengthScheduler's own steps: each request's drafts cut to its length for the step,
chosen by the goodput rule for requests with an acceptance prior, and held drafts checked
against what the step produced. vLLM's scheduler class, with only the state these steps read.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.outputs import DraftTokenIds

from app.drafting.draft_plan import DraftPlanner
from app.drafting.length_rule import StepCostPrior
from app.engine.vllm.core.draft_length_scheduler import DraftLengthScheduler, platform_planner
from app.engine.vllm.extra_args import ACCEPTANCE_PRIOR_KEY, DRAFT_LENGTH_KEY, STEP_COST_KEY

K = 5
PROPOSAL = [11, 12, 13, 14, 15]


class Unconstrained:
    """vLLM's structured-output manager, for requests without a grammar."""

    def validate_tokens(self, request: Any, tokens: list[int]) -> list[int]:
        return tokens


def request(request_id: str, **extra_args: float) -> SimpleNamespace:
    return SimpleNamespace(
        request_id=request_id,
        sampling_params=SamplingParams(extra_args=extra_args or None),
        spec_token_ids=[],
        is_prefill_chunk=False,
        is_finished=lambda: False,
    )


def scheduler(requests: list[SimpleNamespace], cost: StepCostPrior) -> DraftLengthScheduler:
    made = DraftLengthScheduler.__new__(DraftLengthScheduler)
    made.num_spec_tokens = K
    made.requests = {r.request_id: r for r in requests}
    made.running = list(requests)
    made.structured_output_manager = Unconstrained()
    made.planner = DraftPlanner(cost)
    made._proposed = {}
    made._step_started = None
    return made


def propose(made: DraftLengthScheduler) -> dict[str, list[int]]:
    ids = list(made.requests)
    made.update_draft_token_ids(DraftTokenIds(ids, [list(PROPOSAL) for _ in ids]))
    return {request_id: list(made.requests[request_id].spec_token_ids) for request_id in ids}


# A CPU-like step: a draft token costs a tenth of a lone step.
CPU_LIKE = StepCostPrior(
    base_ms=20, per_sequence_ms=3, per_token_ms=2.5, per_sequence_drafting_ms=0.5
)


def test_each_request_gets_its_own_length_in_the_same_step() -> None:
    made = scheduler(
        [
            request("fixed"),  # no prior: the engine's K, as far as drafts exist
            request("capped", **{DRAFT_LENGTH_KEY: 2}),
            request("never", **{DRAFT_LENGTH_KEY: 0}),
            request("copying", **{ACCEPTANCE_PRIOR_KEY: 0.9}),
            request("fresh", **{ACCEPTANCE_PRIOR_KEY: 0.02}),
            request("copying-capped", **{ACCEPTANCE_PRIOR_KEY: 0.9, DRAFT_LENGTH_KEY: 1}),
        ],
        CPU_LIKE,
    )
    drafts = propose(made)
    assert drafts["fixed"] == PROPOSAL
    assert drafts["capped"] == PROPOSAL[:2]
    assert drafts["never"] == []
    assert drafts["fresh"] == []
    assert drafts["copying-capped"] == PROPOSAL[:1]
    assert 2 <= len(drafts["copying"]) <= K
    assert drafts["copying"] == PROPOSAL[: len(drafts["copying"])]


def step(made: DraftLengthScheduler, produced: dict[str, list[int]]) -> None:
    """What update_from_output learns from a step that produced these tokens."""
    ids = list(produced)
    output = SimpleNamespace(
        sampled_token_ids=[produced[i] for i in ids],
        req_id_to_index={request_id: i for i, request_id in enumerate(ids)},
    )
    made._learn_acceptance(output)  # type: ignore[arg-type]


def test_a_request_that_stopped_drafting_starts_again_when_held_drafts_land() -> None:
    made = scheduler([request("r", **{ACCEPTANCE_PRIOR_KEY: 0.5})], CPU_LIKE)
    lengths = []
    for _ in range(20):  # fresh text: nothing the drafter proposes comes true
        lengths.append(len(propose(made)["r"]))
        step(made, {"r": [99] * (lengths[-1] + 1)})
    assert lengths[0] > 0 and lengths[-1] == 0
    for _ in range(20):  # the answer starts copying: the held drafts match what it produces
        length = len(propose(made)["r"])
        lengths.append(length)
        step(made, {"r": PROPOSAL[: length + 1]})
    assert lengths[-1] >= 3, lengths


def test_the_same_request_drafts_less_in_a_crowded_step() -> None:
    prior = {ACCEPTANCE_PRIOR_KEY: 0.6}
    alone = scheduler([request("r", **prior)], CPU_LIKE)
    crowd = scheduler([request(f"r{i}", **prior) for i in range(16)], CPU_LIKE)
    assert len(propose(alone)["r"]) > len(propose(crowd)["r0"])


def test_the_engines_planner_holds_a_line_fixed_in_its_config() -> None:
    fixed = platform_planner({STEP_COST_KEY: [40, 0, 2.4, 2.9]}).step_cost
    learning = platform_planner(None).step_cost
    assert fixed.fixed and not learning.fixed
    assert fixed.prior == StepCostPrior(40.0, 0.0, 2.4, 2.9)
    for cost in (fixed, learning):
        cost.observe(8, 8, False, 400.0)  # a step ten times its price: a loaded machine
    assert fixed.predict(8, 8) == 40 + 8 * 2.4
    assert learning.predict(8, 8) > fixed.predict(8, 8)
