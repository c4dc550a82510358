"""Annotated dependency aliases: routes read shared state through these."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from app.errors import EngineUnavailableError
from app.gateway import Gateway
from app.routing.policy import HEADER


def get_gateway(request: Request) -> Gateway:
    gateway: Gateway | None = getattr(request.app.state, "gateway", None)
    if gateway is None:
        raise EngineUnavailableError("the engines are not running")
    return gateway


# What parse_header accepts (it ignores case and spaces), for the OpenAPI document.
HEADER_PATTERN = r"^\s*([Oo][Nn]|[Oo][Ff][Ff]|[Aa][Uu][Tt][Oo])\s*(;\s*[Kk]\s*=\s*[0-9]+\s*)?$"
GatewayDep = Annotated[Gateway, Depends(get_gateway)]
SpeculativeHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description="Force the engine: 'on' (speculative), 'off' (plain) or 'auto' (default: "
        "chosen by workload class). 'on' and 'auto' may cap the draft tokens per step, as "
        "'on;k=2' (1 to the engine's K; embedded speculative engines only).",
        # Documented, not enforced here: parse_header answers a bad value with its own 400.
        json_schema_extra={"pattern": HEADER_PATTERN, "examples": ["auto", "on", "off", "on;k=2"]},
    ),
]
MoveAfterHeader = Annotated[
    int | None,
    Header(
        alias="X-Specgate-Move-After",
        ge=1,
        description="Move this request to the other engine after this many tokens, if it can "
        "move (mid-stream moves on; a route pinned with X-Speculative moves too): for tests and "
        "for measuring a move's cost.",
    ),
]
