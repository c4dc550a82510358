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


GatewayDep = Annotated[Gateway, Depends(get_gateway)]
SpeculativeHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        description="Force the engine: 'on' (speculative), 'off' (plain) or 'auto' (default: "
        "chosen by workload class).",
        json_schema_extra={"enum": ["on", "off", "auto"]},
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
