"""What an engine cannot serve, so the router can send a request where it can be served.

Each engine answers for itself (`Engine.refusal`): a speculative vLLM engine cannot apply
some sampling fields while it drafts, and a remote route does not read logprobs back. The
router asks every route before choosing one, and a client's pinned route that refuses the
request gets a 400 naming the fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.types import SamplingOptions


@dataclass(frozen=True)
class Refusal:
    """Request fields an engine cannot serve, and why (a phrase: "not supported ...")."""

    fields: tuple[str, ...]
    why: str

    @property
    def names(self) -> str:
        return " and ".join(self.fields)


def refusal_of(fields: list[str], why: str) -> Refusal | None:
    return Refusal(tuple(fields), why) if fields else None


def drafting_refusal(
    options: SamplingOptions, applies_sampling_fields_at_drafts: bool = False
) -> Refusal | None:
    """The sampling fields vLLM 0.32 cannot serve on a request that drafts.

    min_p and logit_bias are refused there by the V1 model runner (its rejection sampler
    does not apply them at drafted positions; Model Runner V2's does, so an engine on V2
    serves them: app/engine/model_runner.py). top_k is accepted, but sampling with it alone
    killed a CPU engine core (an empty tensor in the rejection sampler's top-k step; found
    by tests/engine fuzzing), so it stays off drafting requests too.
    """
    names = ("top_k",) if applies_sampling_fields_at_drafts else ("min_p", "logit_bias", "top_k")
    fields = [name for name in names if getattr(options, name)]
    return refusal_of(fields, "not supported while drafting")


def combined(*refusals: Refusal | None) -> Refusal | None:
    present = [refusal for refusal in refusals if refusal is not None]
    if not present:
        return None
    fields = tuple(name for refusal in present for name in refusal.fields)
    return Refusal(fields, "; ".join(dict.fromkeys(refusal.why for refusal in present)))
