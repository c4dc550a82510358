"""A discrete-event simulation of one vLLM engine's continuous batching on a GPU.

Each step, as vLLM's V1 scheduler builds it: every running request that has its first token
decodes (1 token, plus the drafts its arm chose to verify), then waiting prompts are prefilled
in chunks with the token budget left, FIFO, while `max_num_seqs` and the KV cache allow. The
step's time comes from aiconfigurator's measured operation times (bench/gpu_sim/costs.py),
plus the drafter's work and a host overhead per step; the clock then jumps by it. A prompt's
first token comes out of the step that finishes its prefill.

Simplifications, each an assumption of the simulation: KV for a request's whole prompt and
output is reserved when it is admitted (no preemption); the drafter's work is charged to
the step that verifies its drafts; drafts are priced by the positions they cover, not their
tokens.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bench.gpu_sim.costs import StepPricer
from bench.gpu_sim.workload import Phase, RequestMaker, SimRequest

# vLLM's defaults for its OpenAI server on GPUs of 70 GiB or more that are not A100s
# (vllm/engine/arg_utils.py, get_batch_defaults).
MAX_NUM_SEQS = 1024
MAX_BATCHED_TOKENS = 8192
GPU_MEMORY_UTILIZATION = 0.9
# vLLM's host work per step (scheduling, sampling bookkeeping, outputs) with synchronous
# scheduling, as n-gram speculation always has: 1.207 ms, fitted to vLLM 0.10.1 on an H100
# (SpecDecode-Bench's simulator, predictor.py). Charged to every arm alike; async scheduling
# (vLLM's default for draft models and EAGLE, which specgate now follows) would hide it.
HOST_MS_PER_STEP = 1.2
# vLLM's n-gram proposer runs on the host for every running request; an assumption.
NGRAM_MS_PER_SEQUENCE = 0.01
# arctic-inference's suffix trees, also on the host: a match, a draft and an update per
# running request each step; an assumption (its trees are C++, the loop around them Python).
SUFFIX_MS_PER_SEQUENCE = 0.05


class Pricer(Protocol):
    """A target model's step prices (bench/gpu_sim/costs.py's StepPricer, or a test's)."""

    def step_ms(
        self, sequences: int, verified_tokens: int, context: int, upper_bound: bool = False
    ) -> float: ...

    def prefill_ms(self, tokens: int, context: int) -> float: ...


class Drafter(Protocol):
    method: str

    def ms(self, draft_steps: Sequence[int], context: int) -> float:
        """Drafting cost of a step: `draft_steps[i]` tokens drafted for sequence i."""
        ...


def draft_bound(drafter: Drafter) -> Callable[[int], int] | None:
    """How far a drafter drafts from a match of a given length (suffix trees); None: as far
    as the engine's K."""
    return drafter.longest if isinstance(drafter, SuffixDrafter) else None


@dataclass
class NgramDrafter:
    method: str = "ngram"

    def ms(self, draft_steps: Sequence[int], context: int) -> float:
        return NGRAM_MS_PER_SEQUENCE * sum(1 for s in draft_steps if s)


@dataclass
class SuffixDrafter:
    """arctic-inference's suffix trees as vLLM 0.32 configures them: they hold at most
    `depth` tokens of match plus draft, and a draft is at most `factor` times its match
    (`suffix_decoding_max_tree_depth`, `..._max_spec_factor`; vLLM's defaults 24 and 1)."""

    depth: int = 24
    factor: float = 1.0
    method: str = "suffix"
    # longest(match) for every match up to the depth: asked per request every step.
    _longest: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The trees try every shorter match too and keep the best: min(factor * m, depth - m)
        # at its best m (12 with vLLM's defaults).
        best, table = 0, [0]
        for m in range(1, self.depth + 1):
            best = max(best, min(int(self.factor * m), self.depth - m))
            table.append(best)
        self._longest = tuple(table)

    def ms(self, draft_steps: Sequence[int], context: int) -> float:
        return SUFFIX_MS_PER_SEQUENCE * len(draft_steps)

    def longest(self, match: int) -> int:
        """The longest draft from a match of `match` tokens."""
        return self._longest[min(max(match, 0), self.depth)]


@dataclass
class ModelDrafter:
    """A draft model (method "draft_model", its own decode step per token) or an EAGLE-like
    head on the target (method "eagle": one decoder layer and the LM head per token)."""

    method: str
    pricer: StepPricer

    def ms(self, draft_steps: Sequence[int], context: int) -> float:
        ms = 0.0
        for j in range(1, max(draft_steps, default=0) + 1):
            batch = sum(1 for s in draft_steps if s >= j)
            if self.method == "eagle":
                ms += self.pricer.head_ms(batch, context)
            else:
                ms += self.pricer.step_ms(batch, batch, context)
        return ms


@dataclass
class EngineSetup:
    name: str
    target: Pricer
    drafter: Drafter
    k: int  # the engine's num_speculative_tokens
    kv_tokens: int
    upper_bound: bool = False  # price verified tokens' attention per token (aiconfigurator's nextn)
    host_ms: float = HOST_MS_PER_STEP
    max_num_seqs: int = MAX_NUM_SEQS
    max_batched_tokens: int = MAX_BATCHED_TOKENS

    def step_ms(self, sequences: int, tokens: int, context: int, drafted: Sequence[int]) -> float:
        """A decode step's price: target, drafter and host (no prefill)."""
        target = self.target.step_ms(sequences, tokens, context, upper_bound=self.upper_bound)
        return target + self.drafter.ms(drafted, context) + self.host_ms


class Arm(Protocol):
    name: str
    setup: EngineSetup  # the engine it runs on (its drafter's settings included)

    def admit(self, request: SimRequest, in_flight: int) -> None: ...

    def lengths(self, decoding: Sequence[SimRequest], offers: Sequence[int]) -> list[int]:
        """Draft tokens each decoding request verifies this step, within its offer."""
        ...

    def draft_steps(self, decoding: Sequence[SimRequest], lengths: Sequence[int]) -> list[int]:
        """Tokens the drafter drafts per request this step."""
        ...

    def observe_step(self, sequences: int, tokens: int, drafting: bool, ms: float) -> None:
        """A step's time, as the engine's scheduler sees it: every scheduled sequence and
        every token computed (prompt chunks included)."""
        ...

    def observe(
        self, request: SimRequest, offered: int, verified: int, lands: int, produced: int
    ) -> None:
        """One request's step: `offered` drafts proposed, `verified` of them checked,
        `lands` of the offered ones in a row would match, `produced` tokens came out."""
        ...

    def finished(self, request: SimRequest) -> None: ...


@dataclass
class StepLog:
    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    busy_ms: float = 0.0


class Gate(Protocol):
    """The gateway's admission in front of the engine (bench/gpu_sim/admission_gate.py)."""

    def arrive(self, request: SimRequest) -> list[SimRequest]: ...

    def release(self, request: SimRequest) -> list[SimRequest]: ...


@dataclass
class Simulation:
    setup: EngineSetup
    arm: Arm
    log: StepLog = field(default_factory=StepLog)
    finished: list[SimRequest] = field(default_factory=list)
    # None: every request reaches the engine's own queue on arrival.
    gate: Gate | None = None

    def run(self, arrivals: list[SimRequest], follow: Callable[[float], SimRequest | None]) -> None:
        """Serve `arrivals` (by arrival time), and whatever `follow(now)` sends each time a
        request ends (a closed-loop client's next request), until nothing is left."""
        setup, arm = self.setup, self.arm
        pending = [(r.arrival_s, i, r) for i, r in enumerate(arrivals)]
        heapq.heapify(pending)
        order = len(pending)
        waiting: deque[SimRequest] = deque()
        running: list[SimRequest] = []
        kv_free = setup.kv_tokens
        now = 0.0
        bound = draft_bound(setup.drafter)
        while pending or waiting or running:
            while pending and pending[0][0] <= now:
                request = heapq.heappop(pending)[2]
                arm.admit(request, len(running) + len(waiting))
                waiting.extend([request] if self.gate is None else self.gate.arrive(request))
            if not waiting and not running:
                now = pending[0][0]
                continue
            while waiting and len(running) < setup.max_num_seqs:
                need = waiting[0].prompt_tokens + waiting[0].output_tokens
                if need > kv_free and running:
                    break
                request = waiting.popleft()
                kv_free -= need
                request.admitted = True
                running.append(request)
            decoding = [r for r in running if r.first_token_s is not None]
            prefilling = [r for r in running if r.first_token_s is None]
            offers = [r.pattern.available(r.generated, setup.k, bound) for r in decoding]
            lengths = arm.lengths(decoding, offers) if decoding else []
            tokens = len(decoding) + sum(lengths)
            context = sum(r.context for r in decoding) // len(decoding) if decoding else 0
            ms = 0.0
            if decoding:
                ms = setup.step_ms(
                    len(decoding), tokens, context, arm.draft_steps(decoding, lengths)
                )
            else:
                ms = setup.host_ms
            budget = setup.max_batched_tokens - tokens
            chunks: list[tuple[SimRequest, int]] = []
            for request in prefilling:
                if budget <= 0:
                    break
                chunk = min(budget, request.prompt_tokens - request.prefilled)
                chunks.append((request, chunk))
                budget -= chunk
            prefill_tokens = sum(c for _, c in chunks)
            if prefill_tokens:
                reach = max(r.prefilled + c for r, c in chunks)
                ms += setup.target.prefill_ms(prefill_tokens, reach)
            now += ms / 1000.0
            self.log.steps += 1
            self.log.busy_ms += ms
            sequences = len(decoding) + len(chunks)
            arm.observe_step(sequences, tokens + prefill_tokens, any(lengths), ms)
            done: list[SimRequest] = []
            for request, offered, verified in zip(decoding, offers, lengths, strict=True):
                lands = request.pattern.run_length(request.generated, offered)
                accepted = min(lands, verified)
                produced = min(accepted + 1, request.output_tokens - request.generated)
                request.generated += produced
                self.log.draft_tokens += verified
                self.log.accepted_tokens += accepted
                arm.observe(request, offered, verified, lands, produced)
                if request.generated >= request.output_tokens:
                    done.append(request)
            for request, chunk in chunks:
                request.prefilled += chunk
                if request.prefilled >= request.prompt_tokens:
                    request.first_token_s = now
                    request.generated = 1
                    if request.output_tokens <= 1:
                        done.append(request)
            for request in done:
                request.finished_s = now
                running.remove(request)
                kv_free += request.prompt_tokens + request.output_tokens
                arm.finished(request)
                self.finished.append(request)
                if self.gate is not None:
                    waiting.extend(self.gate.release(request))
                follower = follow(now)
                if follower is not None:
                    heapq.heappush(pending, (follower.arrival_s, order, follower))
                    order += 1


def phase_traffic(
    phases: Sequence[Phase], maker: RequestMaker
) -> tuple[list[SimRequest], Callable[[float], SimRequest | None], dict[str, str]]:
    """The arrivals of open-loop phases back to back, or of one closed-loop phase; and which
    phase each request belongs to."""
    phase_of: dict[str, str] = {}
    arrivals: list[SimRequest] = []
    closed = [p for p in phases if p.concurrency]
    if closed:
        (phase,) = closed
        left = [phase.requests - phase.concurrency]

        def follow(now: float) -> SimRequest | None:
            if left[0] <= 0:
                return None
            left[0] -= 1
            request = maker.make(now)
            phase_of[request.request_id] = phase.name
            return request

        for _ in range(min(phase.concurrency, phase.requests)):
            request = maker.make(0.0)
            phase_of[request.request_id] = phase.name
            arrivals.append(request)
        return arrivals, follow, phase_of
    now = 0.0
    gaps = maker.arrival_rng
    for phase in phases:
        for _ in range(phase.requests):
            now += gaps.expovariate(phase.rate_per_s)
            request = maker.make(now)
            phase_of[request.request_id] = phase.name
            arrivals.append(request)
    return arrivals, lambda now: None, phase_of
