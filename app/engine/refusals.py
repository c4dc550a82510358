"""What an engine cannot serve, so the router can send a request where it can be served.

Each engine answers for itself (`Engine.servable`): a speculative vLLM engine cannot apply
some sampling fields while it drafts, and a remote route does not read logprobs back. The
router asks every route before choosing one, and a client's pinned route that refuses the
request gets a 400 naming the fields.
"""

from __future__ import annotations

from app.engine.generation import SamplingOptions
from app.vocabulary import Refusal

# A route whose engine cannot take a request's prediction (EngineFacts.takes_prediction).
PREDICTION_REFUSAL = Refusal(("prediction",), "not supported by remote upstreams")


def prediction_refusal(predicted: bool, takes_prediction: bool) -> Refusal | None:
    return PREDICTION_REFUSAL if predicted and not takes_prediction else None


def refusal_of(fields: list[str], why: str) -> Refusal | None:
    return Refusal(tuple(fields), why) if fields else None


def drafting_refusal(
    options: SamplingOptions,
    applies_sampling_fields_at_drafts: bool = False,
    draft_length: int | None = None,
) -> Refusal | None:
    """The sampling fields vLLM 0.32 cannot serve on a request that drafts; nothing for one
    that never does (draft length 0). A draft length of None is the scheduler's choice, which
    may draft.

    min_p and logit_bias are refused there by the V1 model runner (its rejection sampler
    does not apply them at drafted positions; Model Runner V2's does, so an engine on V2
    serves them: app/engine/vllm/model_runner.py). top_k is accepted, but sampling with it alone
    killed a CPU engine core (an empty tensor in the rejection sampler's top-k step; found
    by tests/engine fuzzing), so it stays off drafting requests too.
    """
    if draft_length == 0:
        return None
    names = ("top_k",) if applies_sampling_fields_at_drafts else ("min_p", "logit_bias", "top_k")
    # min_p cuts nothing from a greedy choice.
    greedy = options.temperature == 0
    fields = [n for n in names if getattr(options, n) and not (n == "min_p" and greedy)]
    return refusal_of(fields, "not supported while drafting")


def combined(*refusals: Refusal | None) -> Refusal | None:
    present = [refusal for refusal in refusals if refusal is not None]
    if not present:
        return None
    fields = tuple(name for refusal in present for name in refusal.fields)
    return Refusal(fields, "; ".join(dict.fromkeys(refusal.why for refusal in present)))
