"""The simulated traffic: requests of five classes, their lengths, and when they arrive.

Every request carries a real prompt from bench/prompts.jsonl's report split (the priors were
tuned on the tune split), so specgate's policy classifies it with its own features, as the
gateway would; its lengths are GPU-serving sizes drawn per class, and its draft pattern is
drawn once (app-independent), so every arm serves exactly the same requests.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from app.routing.classify import classify
from app.routing.features import RequestFeatures, extract_features
from bench.gpu_sim.acceptance import (
    COPYING,
    REPEATING,
    REPEATS,
    DraftPattern,
    draw_pattern,
    request_acceptance,
    with_suffix_drafts,
)

PROMPTS = Path(__file__).resolve().parent.parent / "prompts.jsonl"
# The benchmark prompts' classes each simulated class borrows its prompt text from.
PROMPT_CLASS = {
    "code": "code",
    "json": "structured",
    "edit": "edit",
    "chat": "open-ended",
    "creative": "open-ended",
}
TEMPERATURE = {"code": 0.0, "json": 0.0, "edit": 0.0, "chat": 0.7, "creative": 1.0}
# (prompt tokens, output tokens) ranges per class, drawn uniformly: typical serving sizes,
# assumed (agents' code and edits carry long contexts; creative answers are long and short
# of context).
LENGTHS = {
    "code": ((300, 1500), (150, 600)),
    "json": ((400, 2000), (80, 400)),
    "edit": ((800, 3000), (300, 1000)),
    "chat": ((100, 1200), (100, 500)),
    "creative": ((50, 300), (200, 800)),
}
# The share of each class's answers that turn into a copy of their context part-way.
CHANGES_CHARACTER = {"code": 0.2, "json": 0.0, "edit": 0.3, "chat": 0.25, "creative": 0.0}
EVEN_MIX = {name: 1.0 for name in LENGTHS}


@dataclass
class SimRequest:
    request_id: str
    workload: str  # the simulated class (the truth)
    features: RequestFeatures  # what specgate's policy sees
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    pattern: DraftPattern
    # Whose request it is (the flood scenario's keys; "" elsewhere).
    tenant: str = ""
    # Filled in by the simulator.
    prefilled: int = 0
    generated: int = 0
    admitted: bool = False
    first_token_s: float | None = None
    finished_s: float | None = None
    arm_state: dict[str, object] = field(default_factory=dict)

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.generated


def _prompts() -> dict[str, list[dict[str, object]]]:
    by_class: dict[str, list[dict[str, object]]] = {}
    for line in PROMPTS.read_text().splitlines():
        prompt = json.loads(line)
        if prompt.get("split") == "report":
            by_class.setdefault(str(prompt["class"]), []).append(prompt)
    return by_class


def _features(prompt: dict[str, object], temperature: float) -> RequestFeatures:
    if "messages" in prompt:
        messages = prompt["messages"]
        assert isinstance(messages, list)
        text = "\n".join(str(message["content"]) for message in messages)
    else:
        text = str(prompt["prompt"])
    return extract_features(
        text, wants_json=bool(prompt.get("response_format")), temperature=temperature
    )


class RequestMaker:
    """Draws requests for one drafting method: class, prompt, lengths, draft pattern."""

    def __init__(self, method: str, seed: int, mix: dict[str, float] | None = None) -> None:
        self.method = method
        self._rng = random.Random(seed)
        # Open-loop gaps come from their own stream, so the requests do not depend on them.
        self.arrival_rng = random.Random(seed + 1)
        self._prompts = _prompts()
        self._mix = mix or EVEN_MIX
        self._count = 0

    def make(self, arrival_s: float) -> SimRequest:
        rng = self._rng
        classes = list(self._mix)
        workload = rng.choices(classes, weights=[self._mix[c] for c in classes])[0]
        (p_low, p_high), (o_low, o_high) = LENGTHS[workload]
        output = rng.randint(o_low, o_high)
        phases = [(0, request_acceptance(rng, self.method, workload))]
        if rng.random() < CHANGES_CHARACTER[workload]:
            phases.append((int(output * rng.uniform(0.3, 0.6)), COPYING[self.method]))
        # Only the suffix drafter draws more (so the other methods' traffic stays as it was).
        if self.method == "suffix" and rng.random() < REPEATS[workload]:
            phases = [(0, REPEATING)]
        prompt = rng.choice(self._prompts[PROMPT_CLASS[workload]])
        self._count += 1
        prompt_tokens = rng.randint(p_low, p_high)  # drawn before the pattern, as it always was
        pattern = draw_pattern(random.Random(rng.random()), phases, output)
        if self.method == "suffix":
            pattern = with_suffix_drafts(random.Random(rng.random()), pattern, phases)
        return SimRequest(
            request_id=f"{workload}-{self._count}",
            workload=workload,
            features=_features(prompt, TEMPERATURE[workload]),
            arrival_s=arrival_s,
            prompt_tokens=prompt_tokens,
            output_tokens=output,
            pattern=pattern,
        )


def policy_class(request: SimRequest) -> str:
    """What specgate's classifier calls the request (for the reports)."""
    return classify(request.features).value


@dataclass(frozen=True)
class Phase:
    """A stretch of traffic: Poisson arrivals at `rate_per_s`, or a closed loop of
    `concurrency` clients (each sends its next request when the last one ends)."""

    name: str
    requests: int
    rate_per_s: float = 0.0
    concurrency: int = 0
