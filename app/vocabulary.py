"""The words every layer shares: the two routes, a chat turn, what drafting did, and a refusal.

The routing policy, the engines and the HTTP layer all speak of these; they live here, below
all three, so that the policy never imports the engine layer (tests/fast/test_layers.py).
No vLLM types here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Required, TypedDict

Route = Literal["speculative", "plain"]


ROUTES: tuple[Route, ...] = ("speculative", "plain")


def other_route(route: Route) -> Route:
    return "plain" if route == "speculative" else "speculative"


@dataclass(frozen=True)
class SpecDecodeStats:
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    # Verification steps by draft length: element i counts steps that checked i+1 draft
    # tokens (empty when the engine does not report it).
    draft_lengths: tuple[int, ...] = ()
    # Verification steps by drafts accepted: element j counts steps that accepted j (vLLM's
    # acceptance_histogram, 0..K), and the engine's K; empty and 0 where not reported.
    acceptance_histogram: tuple[int, ...] = ()
    spec_tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def accepted_length(self) -> float:
        """Tokens emitted per verification step: the accepted drafts plus the bonus token."""
        return 1 + self.accepted_tokens / max(self.drafts, 1)

    def __add__(self, other: SpecDecodeStats) -> SpecDecodeStats:
        return SpecDecodeStats(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            _summed(self.draft_lengths, other.draft_lengths),
            _summed(self.acceptance_histogram, other.acceptance_histogram),
            max(self.spec_tokens, other.spec_tokens),
        )


def _summed(mine: tuple[int, ...], theirs: tuple[int, ...]) -> tuple[int, ...]:
    """Two histograms added bucket by bucket, the shorter padded with zeros."""
    longest = max(len(mine), len(theirs))
    padded = [(*counts, *[0] * (longest - len(counts))) for counts in (mine, theirs)]
    return tuple(a + b for a, b in zip(*padded, strict=True))


@dataclass(frozen=True)
class PredictionCounts:
    """How a client's prediction of the answer (OpenAI's Predicted Outputs) fared: its length
    in tokens, and how many of the tokens it drafted the answer produced at their place."""

    tokens: int
    accepted: int = 0

    @property
    def rejected(self) -> int:
        """The prediction's tokens that did not land (OpenAI: still billed as output)."""
        return max(self.tokens - self.accepted, 0)


@dataclass(frozen=True)
class Refusal:
    """Request fields an engine cannot serve, and why (a phrase: "not supported ...")."""

    fields: tuple[str, ...]
    why: str

    @property
    def names(self) -> str:
        return " and ".join(self.fields)


class ChatMessage(TypedDict, total=False):
    """A chat turn as chat templates (and OpenAI's wire) take it: role and content always."""

    role: Required[str]
    content: Required[str | None]
    # An assistant turn's calls, in OpenAI's shape, and a tool turn's answer to one.
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    name: str
