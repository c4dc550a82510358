"""What the gateway keeps for its tenants around each run: its place under its key's limits,
its share of the engine, and its usage.

A request is granted before it is routed (`open`: a refusal costs nothing and routes
nothing), charged its prompt and its expected output when it is admitted to an engine
(`admitted`), its usage kept in
the ledger when it completes (`completed`, before the client sees the end of it), and settled
when it is released (`finished`): the tokens it reserved and did not use go back to its key,
its fair-share charge becomes what it really used, and its usage is kept if it was not yet
(an aborted or failed request).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.engine.generation import Prompt, SamplingOptions
from app.errors import QuotaExceededError, RateLimitError
from app.tenants.access import Access
from app.tenants.fair_share import FairShare
from app.tenants.ledger import UsageLedger, UsageRecord
from app.tenants.rate_limits import Grant, Limiter, RateLimiter
from app.vocabulary import SpecDecodeStats

# What a request without max_tokens reserves of its key's tokens per minute, per sequence,
# until it ends and gives back what it did not use.
UNBOUNDED_RESERVE = 1024
# Characters per token, for estimating a prompt's tokens before the engine has them.
CHARS_PER_TOKEN = 4


def estimated_prompt_tokens(prompts: list[Prompt]) -> int:
    total = 0
    for prompt in prompts:
        if isinstance(prompt, str):
            total += len(prompt) // CHARS_PER_TOKEN + 1
        elif prompt and isinstance(prompt[0], int):
            total += len(prompt)
        else:  # chat turns: their text, and a few tokens of template each
            for turn in prompt:
                content = turn.get("content") if isinstance(turn, dict) else None
                total += len(str(content or "")) // CHARS_PER_TOKEN + 4
    return total


@dataclass
class TenantCharge:
    """One request's account with its tenant's books."""

    access: Access
    grant: Grant | None
    prompt_estimate: int
    sequences: int = 1
    max_tokens: int | None = None
    charged: float = 0.0
    # Its usage is in the ledger (or there is none).
    recorded: bool = False
    # Ended (finished, or given back as never run): nothing more to settle.
    settled: bool = False


@dataclass
class UsageFigures:
    """What a run used, for its tenant's books."""

    request_id: str
    outcome: str
    prompt_tokens: int
    completion_tokens: int
    draft_stats: SpecDecodeStats | None

    @property
    def rejected_drafts(self) -> int:
        stats = self.draft_stats
        return 0 if stats is None else max(0, stats.draft_tokens - stats.accepted_tokens)


class TenantBooks:
    def __init__(
        self,
        limiter: Limiter | None = None,
        fair_share: FairShare | None = None,
        ledger: UsageLedger | None = None,
        model: str = "",
    ):
        self.limiter: Limiter = limiter if limiter is not None else RateLimiter()
        self.fair_share = fair_share if fair_share is not None else FairShare()
        self.ledger = ledger
        self.model = model

    def open(self, access: Access, prompts: list[Prompt], options: SamplingOptions) -> TenantCharge:
        """The request's charge; raises RateLimitError or QuotaExceededError when its key's
        limits refuse it. Either way the response's rate-limit headers are set."""
        estimate = estimated_prompt_tokens(prompts)
        sequences = len(prompts) * options.n
        key = access.key
        if key is None:
            return TenantCharge(access, None, estimate, sequences, options.max_tokens)
        reserved = estimate + sequences * (options.max_tokens or UNBOUNDED_RESERVE)
        try:
            grant = self.limiter.take(key, reserved)
        except (RateLimitError, QuotaExceededError) as exc:
            access.headers = self.limiter.headers(key)
            self.refused(access, exc.code or "rate_limit_exceeded")
            raise
        access.headers = grant.headers
        return TenantCharge(access, grant, estimate, sequences, options.max_tokens)

    def admitted(self, charge: TenantCharge) -> None:
        """The request has a slot: charge its prompt and its expected output (estimates
        until it ends)."""
        share = self.fair_share
        output = charge.sequences * share.expected_output(charge.access.tenant, charge.max_tokens)
        charge.charged = share.costs.prompt * charge.prompt_estimate + share.costs.output * output
        share.charge(charge.access.tenant, charge.charged, charge.access.weight)

    def never_ran(self, charge: TenantCharge) -> None:
        """Refused or failed before it started: its key gets back all it took."""
        if charge.settled:
            return
        charge.settled = True
        if charge.grant is not None:
            self.limiter.refund(charge.grant)
        if charge.charged:
            self.fair_share.charge(charge.access.tenant, -charge.charged, charge.access.weight)
            charge.charged = 0.0

    def refused(self, access: Access, code: str) -> None:
        """A 429 for this client: counted in its usage."""
        if self.ledger is not None:
            self.ledger.refused(access.tenant, self.model, code, time.time())

    def completed(self, charge: TenantCharge, used: UsageFigures) -> None:
        """Keep its usage, before the client sees it complete."""
        if charge.recorded:
            return
        charge.recorded = True
        if self.ledger is None:
            return
        stats = used.draft_stats
        self.ledger.record(
            UsageRecord(
                used.request_id,
                charge.access.tenant,
                self.model,
                time.time(),
                used.prompt_tokens,
                used.completion_tokens,
                stats.draft_tokens if stats is not None else 0,
                stats.accepted_tokens if stats is not None else 0,
                used.outcome,
            )
        )

    def finished(self, charge: TenantCharge, used: UsageFigures) -> None:
        if charge.settled:
            return
        self.completed(charge, used)  # an aborted or failed run: kept now
        charge.settled = True
        if charge.grant is not None:
            self.limiter.release(charge.grant, used.prompt_tokens + used.completion_tokens)
        cost = self.fair_share.costs.of(
            used.prompt_tokens, used.completion_tokens, used.rejected_drafts
        )
        if used.completion_tokens:
            per_sequence = used.completion_tokens / max(1, charge.sequences)
            self.fair_share.answered(charge.access.tenant, per_sequence)
        self.fair_share.charge(charge.access.tenant, cost - charge.charged, charge.access.weight)
        charge.charged = cost
