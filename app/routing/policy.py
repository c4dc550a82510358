"""The routing decision: the client's X-Speculative header first, then a workload rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.engine.types import Route
from app.errors import InvalidRequestError
from app.routing.classify import WorkloadClass

HEADER = "X-Speculative"
Preference = Literal["on", "off", "auto"]

# Prompt-lookup drafts pay only when the output copies the prompt: measured on CPUs, ngram
# speculation sped up a JSON continuation and slowed fresh code and poems (README, "Routing").
SPECULATE_CLASSES = frozenset({WorkloadClass.STRUCTURED, WorkloadClass.EDIT})
# Above this temperature drafts are mostly rejected whatever the class.
MAX_SPECULATIVE_TEMPERATURE = 1.0


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    workload_class: WorkloadClass
    reason: str


def parse_preference(header_value: str | None) -> Preference:
    value = (header_value or "auto").strip().lower()
    if value not in ("on", "off", "auto"):
        raise InvalidRequestError(
            f"{HEADER} must be one of on, off, auto; got {header_value!r}",
            param=HEADER,
            code="invalid_header",
        )
    return value  # type: ignore[return-value]


def decide(
    preference: Preference, workload_class: WorkloadClass, temperature: float | None
) -> RouteDecision:
    if preference == "on":
        return RouteDecision("speculative", workload_class, "header: X-Speculative on")
    if preference == "off":
        return RouteDecision("plain", workload_class, "header: X-Speculative off")
    if temperature is not None and temperature > MAX_SPECULATIVE_TEMPERATURE:
        return RouteDecision(
            "plain", workload_class, f"auto: temperature {temperature} makes drafts miss"
        )
    if workload_class in SPECULATE_CLASSES:
        return RouteDecision(
            "speculative", workload_class, f"auto: {workload_class} output copies the prompt"
        )
    return RouteDecision(
        "plain", workload_class, f"auto: {workload_class} output copies little of the prompt"
    )
