"""Annotated dependency aliases: each handler takes the parts of the app it needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Header, Request

from app.api.speculative_header import checked, parse_header
from app.dispatch import Dispatcher
from app.engine.protocol import Engine
from app.engine.tokenizing import TokenizerService
from app.errors import EngineUnavailableError
from app.gateway import Gateway
from app.metrics import GatewayMetrics
from app.response_store import ResponseStore
from app.routing.choice_header import HEADER, HEADER_PATTERN
from app.routing.policy import ClientChoice
from app.served import ServedModel
from app.tenancy import Tenancy
from app.tenants.access import STATE_NAME
from app.tools.auto_tools import AutoToolChoice
from app.vocabulary import Route


def get_gateway(request: Request) -> Gateway:
    gateway: Gateway | None = getattr(request.app.state, "gateway", None)
    if gateway is None:
        raise EngineUnavailableError("the engines are not running")
    return gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


def _dispatcher(gateway: GatewayDep) -> Dispatcher:
    return gateway.dispatcher


def _model(gateway: GatewayDep) -> ServedModel:
    return gateway.model


def _auto_tools(gateway: GatewayDep) -> AutoToolChoice | None:
    return gateway.auto_tools


def _responses(gateway: GatewayDep) -> ResponseStore:
    return gateway.responses


def _tokenizing(gateway: GatewayDep) -> TokenizerService | None:
    return gateway.tokenizing


def _shutdown_grace(gateway: GatewayDep) -> float:
    return gateway.shutdown_grace_seconds


def _engines(gateway: GatewayDep) -> Mapping[Route, Engine]:
    return gateway.engines


def _metrics(gateway: GatewayDep) -> GatewayMetrics:
    return gateway.metrics


DispatcherDep = Annotated[Dispatcher, Depends(_dispatcher)]
ModelDep = Annotated[ServedModel, Depends(_model)]
# How tool_choice "auto" is served; None when --no-enable-auto-tool-choice refuses it.
AutoToolsDep = Annotated[AutoToolChoice | None, Depends(_auto_tools)]
ResponsesDep = Annotated[ResponseStore, Depends(_responses)]
TokenizingDep = Annotated[TokenizerService | None, Depends(_tokenizing)]
# How long open streams may go on once shutdown starts.
ShutdownGraceDep = Annotated[float, Depends(_shutdown_grace)]
EnginesDep = Annotated[Mapping[Route, Engine], Depends(_engines)]
MetricsDep = Annotated[GatewayMetrics, Depends(_metrics)]

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


def _client_choice(gateway: GatewayDep, x_speculative: SpeculativeHeader = None) -> ClientChoice:
    return checked(parse_header(x_speculative), gateway.draft_lengths)


# What the client asked of the routing with X-Speculative, parsed and checked.
ClientChoiceDep = Annotated[ClientChoice, Depends(_client_choice)]


def _tenancy(
    gateway: GatewayDep,
    request: Request,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Tenancy:
    access = getattr(request.state, STATE_NAME, None)
    return Tenancy(gateway.suffix_tree_scope, authorization, access)


# Whose earlier answers the request may draft from; its body's cache_salt completes it.
TenancyDep = Annotated[Tenancy, Depends(_tenancy)]
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
