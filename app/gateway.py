"""The app's parts, built once at start-up (app/main.py); handlers take what they need
through the dependency aliases in app/api/deps.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.dispatch import Dispatcher
from app.engine.protocol import Engine
from app.engine.tokenizing import TokenizerService
from app.metrics import GatewayMetrics
from app.response_store import ResponseStore
from app.routing.policy import DraftLengths, RoutePolicy
from app.served import ServedModel
from app.tenancy import TreeScope
from app.tenants.live_keys import LiveKeyRing
from app.tools.auto_tools import AutoToolChoice
from app.vocabulary import Route


@dataclass
class Gateway:
    model: ServedModel
    engines: Mapping[Route, Engine]
    # Decides, admits and starts every generation request.
    dispatcher: Dispatcher
    metrics: GatewayMetrics
    policy: RoutePolicy
    # What the speculative route takes of a client's draft length (X-Speculative: on;k=N).
    draft_lengths: DraftLengths = field(default_factory=DraftLengths)
    # On shutdown, how long open streams may go on before they are cut.
    shutdown_grace_seconds: float = 0.0
    # Whose earlier answers suffix drafting may draw on: each tenant's own, or everyone's.
    suffix_tree_scope: TreeScope = "tenant"
    # How tool_choice "auto" is served; None: refused (--no-enable-auto-tool-choice).
    auto_tools: AutoToolChoice | None = None
    # The served model's tokenizer, for /tokenize and its kin; None: no engine has one.
    tokenizing: TokenizerService | None = None
    # Stored responses of /v1/responses (previous_response_id, GET /v1/responses/{id}).
    responses: ResponseStore = field(default_factory=lambda: ResponseStore(1000))
    # The API keys in force, for the admin routes (None: built without the app).
    keys: LiveKeyRing | None = None
