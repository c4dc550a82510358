"""How many drafts each arm verifies, request by request and step by step.

- `NoSpeculation`, `FixedK`: vLLM with speculation off, or with `num_speculative_tokens=K`.
- `BatchTable`: vLLM's `num_speculative_tokens_per_batch_size` ([[min, max, K], ...]): every
  request drafts the K of the batch's size.
- `Specgate`: the real thing. Each arrival goes through specgate's routing policy (its class
  from the request's own features, `auto` in one engine: basis `adaptive`, with the class's
  acceptance prior from the learner); every step, the engine's `DraftPlanner` chooses the
  lengths, learns the step-cost line from the simulated step times, and learns each
  request's acceptance from its drafts against the tokens produced, exactly as the vLLM
  scheduler subclass feeds it; a finished request teaches the learner its class's acceptance
  as the gateway does (an n-gram engine's shadow replay of drafting every step; a model
  drafter's own verified drafts).
- `Oracle`: the same rule with each request's true acceptance and the simulated engine's
  true step price: the best a per-request, per-step length can do here.

A `sized` arm's drafter drafts only what the rule chose (the longest chosen length); vLLM
0.32's drafters draft K for every running request each step, whatever is verified.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.drafting.draft_plan import DraftPlanner, Offer
from app.drafting.length_rule import GPU_STEP_PRIOR, Candidate, choose_lengths
from app.main import build_route_policy
from app.routing.load_model import Load
from app.settings import Settings
from app.vocabulary import SpecDecodeStats
from bench.gpu_sim.engine import EngineSetup
from bench.gpu_sim.workload import SimRequest


@dataclass
class _Lengths:
    """What every arm shares: no learning, and a drafter that drafts K for everyone when
    anything is verified this step (vLLM's drafters propose for every running request)."""

    setup: EngineSetup
    name: str = ""

    def admit(self, request: SimRequest, in_flight: int) -> None:
        pass

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        return [self.setup.k] * len(decoding)

    def observe_step(self, sequences: int, tokens: int, drafting: bool, ms: float) -> None:
        pass

    def observe(
        self, request: SimRequest, offered: int, verified: int, lands: int, produced: int
    ) -> None:
        pass

    def finished(self, request: SimRequest) -> None:
        pass


@dataclass
class NoSpeculation(_Lengths):
    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        return [0] * len(offers)

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        return [0] * len(decoding)


@dataclass
class FixedK(_Lengths):
    k: int = 1

    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        return [min(offer, self.k) for offer in offers]

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        return [self.k] * len(decoding)


@dataclass
class BatchTable(_Lengths):
    # [(min batch, max batch, K)], inclusive, as vLLM takes it.
    table: tuple[tuple[int, int, int], ...] = ()

    def k_for(self, batch: int) -> int:
        return next((k for low, high, k in self.table if low <= batch <= high), 0)

    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        k = self.k_for(len(decoding))
        return [min(offer, k) for offer in offers]

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        return [self.k_for(len(decoding))] * len(decoding)


def _sized(lengths: Sequence[int]) -> list[int]:
    longest = max(lengths, default=0)
    return [longest if length else 0 for length in lengths]


@dataclass
class Specgate(_Lengths):
    sized: bool = False
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        self.policy = build_route_policy(self.settings, adaptive=True)
        self.planner = DraftPlanner(GPU_STEP_PRIOR)
        self._prior: dict[str, float | None] = {}
        self._replay: dict[str, SpecDecodeStats] = {}

    def admit(self, request: SimRequest, in_flight: int) -> None:
        decision = self.policy.decide("auto", request.features, Load(0.0, float(in_flight)))
        request.arm_state["workload_class"] = decision.workload_class
        # A decision for the plain route (a temperature or load rule) means length 0.
        self._prior[request.request_id] = (
            decision.acceptance_prior if decision.route == "speculative" else None
        )
        self._replay[request.request_id] = SpecDecodeStats(0, 0, 0)

    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        planned: list[Offer] = []
        for request, offer in zip(decoding, offers, strict=True):
            prior = self._prior[request.request_id]
            if prior is None:  # routed plain: never drafts
                planned.append(Offer(request.request_id, 0, 0.0))
                continue
            pattern, start = request.pattern, request.generated
            # A draft from the request's prediction is priced by what its own have landed,
            # not by the trees' confidence.
            predicted = pattern.predicted_at(start)
            planned.append(
                Offer(
                    request.request_id,
                    offer,
                    prior,
                    confidence=None if predicted else pattern.offered_confidence(start, offer),
                    match_length=0 if predicted else pattern.match_at(start),
                    source="prediction" if predicted else "drafter",
                )
            )
        return self.planner.lengths(planned, len(decoding))

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        if self.sized:
            return _sized(lengths)
        return [self.setup.k] * len(decoding)

    def observe_step(self, sequences: int, tokens: int, drafting: bool, ms: float) -> None:
        self.planner.observe_step(sequences, tokens, drafting, ms)

    def observe(
        self, request: SimRequest, offered: int, verified: int, lands: int, produced: int
    ) -> None:
        if offered:
            # The engine sees tokens: the drafts, and what the step produced (the accepted
            # drafts, then the model's own token, which matches the next draft only where
            # that draft would have landed).
            drafts = [0] * offered
            produced_tokens = [0] * produced
            if lands < produced:
                produced_tokens[lands] = 1
            # The engine has moved past this step's tokens; the drafts started before them.
            start = request.generated - produced
            pattern = request.pattern
            predicted = pattern.predicted_at(start)
            self.planner.observe_drafts(
                request.request_id,
                drafts,
                produced_tokens,
                None if predicted else pattern.offered_confidence(start, offered),
                0 if predicted else pattern.match_at(start),
                source="prediction" if predicted else "drafter",
            )
        # What the gateway learns the class from: an n-gram engine's draft replay replays
        # drafting every step; a model drafter reports what was verified.
        replay = self._replay[request.request_id]
        if self.setup.drafter.method in ("ngram", "suffix"):
            step = SpecDecodeStats(1 if offered else 0, offered, min(lands, offered))
        else:
            step = SpecDecodeStats(1 if verified else 0, verified, min(lands, verified))
        self._replay[request.request_id] = replay + step

    def finished(self, request: SimRequest) -> None:
        workload = request.arm_state["workload_class"]
        stats = self._replay.pop(request.request_id)
        self.policy.learner.observe_acceptance(workload, stats)  # type: ignore[arg-type]
        self._prior.pop(request.request_id)
        self.planner.forget_all_but(self._prior)


@dataclass
class _TruePrice:
    """The simulated engine's own price of a decode step, for the oracle (its drafter drafts
    K for every sequence, whatever is verified, as vLLM's do)."""

    setup: EngineSetup
    context: int
    sequences: int

    def __post_init__(self) -> None:
        drafted = [self.setup.k] * self.sequences
        self._fixed = self.setup.drafter.ms(drafted, self.context) + self.setup.host_ms

    def predict(self, sequences: int, tokens: int, drafting: bool = False) -> float:
        target = self.setup.target.step_ms(
            sequences, tokens, self.context, upper_bound=self.setup.upper_bound
        )
        return target + self._fixed


@dataclass
class Oracle(_Lengths):
    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        # It knows each answer's length too: no drafts past its end.
        candidates = [
            Candidate(
                min(offer, max(0, r.output_tokens - r.generated - 1)),
                min(r.pattern.chance[r.generated], 0.99),
            )
            for r, offer in zip(decoding, offers, strict=True)
        ]
        context = sum(r.context for r in decoding) // max(1, len(decoding))
        price = _TruePrice(self.setup, context, len(decoding))
        return choose_lengths(candidates, len(decoding), price)
