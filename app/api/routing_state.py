"""GET /v1/routing: the rules, the load model, and what the router has learned per class."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from app.api.deps import DispatcherDep
from app.api.openapi_docs import ERRORS

router = APIRouter()


@router.get("/v1/routing", summary="Routing rules and learned estimates", responses=ERRORS)
async def routing_state(dispatcher: DispatcherDep) -> dict[str, Any]:
    """The router's rules and its current estimates per workload class."""
    rules = dispatcher.policy.rules
    learner = dispatcher.policy.learner
    return {
        "rules": {
            "pins": {workload.value: route for workload, route in rules.pins.items()},
            "exploration": rules.exploration,
            "max_speculative_temperature": rules.max_speculative_temperature,
            "max_speculative_load": rules.max_speculative_load,
            "min_acceptance": rules.min_acceptance,
        },
        "load_model": {
            "in_flight": asdict(dispatcher.in_flight.now()),
            "ms_per_token": learner.load_model.snapshot(),
        },
        "classes": learner.snapshot(),
    }
