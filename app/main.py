"""The FastAPI app: routers, error handlers, and a lifespan that owns the engines."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app.admission import Admission
from app.api import (
    chat,
    completions,
    models,
    monitoring,
    responses,
    routing_state,
    tokenize,
    usage,
)
from app.api.api_keys import ApiKeyGuard
from app.api.body_guard import BodyGuard
from app.api.exception_handlers import install_error_handlers
from app.api.openapi_docs import install_openapi
from app.dispatch import Dispatcher, Limits
from app.engine.protocol import Engine
from app.engine.tokenizing import TokenizerService
from app.gateway import Gateway
from app.metrics import GatewayMetrics
from app.response_store import ResponseStore
from app.routing.classify import WorkloadClass
from app.routing.draft_replay import NgramConfig
from app.routing.learner import Learner
from app.routing.policy import DraftLengths, RoutePolicy, RoutingRules
from app.served import ServedModel
from app.settings import Settings
from app.tenants.books import TenantBooks
from app.tenants.ledger import UsageLedger
from app.tenants.live_keys import LiveKeyRing
from app.tenants.rate_limits import Limiter, RateLimiter
from app.tenants.shared_limits import SharedRateLimiter
from app.tools.auto_tools import AutoToolChoice, EnvelopeFormat, ModelFormat
from app.vocabulary import Route

logger = logging.getLogger("specgate")


def build_route_policy(settings: Settings, adaptive: bool = False) -> RoutePolicy:
    rules = RoutingRules(
        pins={WorkloadClass(name): route for name, route in settings.routing_pins.items()},
        exploration=settings.routing_exploration,
        max_speculative_temperature=settings.routing_max_speculative_temperature,
        max_speculative_load=settings.routing_max_speculative_load,
        min_acceptance=settings.routing_min_acceptance,
    )
    return RoutePolicy(rules, Learner(), adaptive=adaptive)


def build_gateway(
    settings: Settings,
    engines: Mapping[Route, Engine],
    ledger: UsageLedger | None = None,
    keys: LiveKeyRing | None = None,
) -> Gateway:
    metrics = GatewayMetrics()
    admissions = {}
    for route, engine in engines.items():
        metrics.watch_engine(route, engine.unfinished_requests)
        admission = Admission(
            route,
            settings.max_running_requests,
            settings.max_queued_requests,
            settings.queue_timeout_seconds,
        )
        metrics.watch_queue(route, admission.queued)
        admissions[route] = admission
    # One engine for both routes chooses every request's draft length at every step: no
    # route to price per request, and nothing to move between (but a client's forced move).
    policy = build_route_policy(settings, adaptive=one_engine_drafts_per_request(engines))
    metrics.watch_learner(policy.learner)
    model = ServedModel(settings.model_id)
    limits = Limits(
        max_tokens_default=settings.max_tokens_default,
        max_tokens_limit=settings.max_tokens_limit,
        max_stop_sequences=settings.max_stop_sequences,
        max_sequences_per_request=settings.max_sequences_per_request,
    )
    dispatcher = Dispatcher(
        model,
        engines,
        admissions,
        policy,
        metrics,
        limits,
        ngram=ngram_config(settings, engines),
        mid_stream=settings.routing_mid_stream == "on",
        log_requests=settings.log_requests,
        tenants=TenantBooks(limiter(settings, ledger), ledger=ledger, model=settings.model_id),
    )
    speculative = engines.get("speculative")
    return Gateway(
        model,
        engines,
        dispatcher,
        metrics,
        policy,
        draft_lengths=DraftLengths(
            per_request=speculative is not None and speculative.facts.per_request_draft_length,
            most=max_draft_length(settings),
        ),
        shutdown_grace_seconds=settings.shutdown_grace_seconds,
        suffix_tree_scope=settings.suffix_tree_scope,
        auto_tools=auto_tool_choice(settings, engines),
        tokenizing=tokenizer_service(engines),
        responses=ResponseStore(settings.responses_store_size),
        keys=keys,
    )


def open_ledger(settings: Settings) -> UsageLedger | None:
    """The usage ledger, or None when it is off. A ledger at the default path (in --cache-dir)
    that cannot be written (a read-only cache, as in the CPU image before it named a volume)
    is left off with a warning; one at a path the operator gave must open, or the start
    fails."""
    path = settings.ledger_path()
    if path is None:
        return None
    try:
        return UsageLedger(path)
    except (OSError, sqlite3.Error) as exc:
        if settings.usage_ledger_path is not None:
            raise RuntimeError(f"--usage-ledger-path {path}: cannot open it ({exc})") from exc
        logger.warning(
            "usage ledger off: %s cannot be written (%s); give --usage-ledger-path", path, exc
        )
        return None


def limiter(settings: Settings, ledger: UsageLedger | None) -> Limiter:
    """The keys' limits: in this process, or in the deployment's Redis."""
    spent = ledger.spent if ledger is not None else None
    if settings.limits_redis:
        return SharedRateLimiter(
            settings.limits_redis, settings.limits_redis_unreachable, spent_before=spent
        )
    return RateLimiter(spent_before=spent)


def one_engine_drafts_per_request(engines: Mapping[Route, Engine]) -> bool:
    """Both routes are one engine that takes a draft length per request (--engine-layout one)."""
    speculative, plain = engines.get("speculative"), engines.get("plain")
    return (
        speculative is not None
        and speculative is plain
        and speculative.facts.per_request_draft_length
    )


def tokenizer_service(engines: Mapping[Route, Engine]) -> TokenizerService | None:
    """The served model's tokenizer: an embedded engine's own, or a remote route's upstreams."""
    # An engine with a tokenizer of its own answers before upstreams that forward.
    ordered = sorted(engines.values(), key=lambda engine: engine.facts.tokenizer is None)
    services = (engine.facts.tokenizing for engine in ordered)
    return next((service for service in services if service is not None), None)


def auto_tool_choice(settings: Settings, engines: Mapping[Route, Engine]) -> AutoToolChoice | None:
    """How `tool_choice: "auto"` is served; None when --no-enable-auto-tool-choice refuses it."""
    if not settings.enable_auto_tool_choice:
        return None
    tokenizers = (engine.facts.tokenizer for engine in engines.values())
    tokenizer = next((t for t in tokenizers if t is not None), None)
    chosen: AutoToolChoice
    if settings.tool_call_parser == "auto" and tokenizer is None:
        # An all-remote gateway has no template at hand (and never loads vLLM).
        chosen = EnvelopeFormat()
    else:
        # Imported only here: it imports vLLM.
        from app.engine.vllm.tool_parser import AutoToolParsing, chat_template, parser_for_template

        name: str | None = settings.tool_call_parser
        why = "--tool-call-parser"
        if name == "auto":
            name = parser_for_template(chat_template(tokenizer))
            why = "picked from the chat template"
        chosen = (
            EnvelopeFormat()
            if name is None
            else ModelFormat(AutoToolParsing(name, tokenizer), f"vLLM's {name} parser ({why})")
        )
    logger.info('tool_choice "auto": %s', chosen.description)
    return chosen


def max_draft_length(settings: Settings) -> int | None:
    """The speculative engine's K, when it is embedded (a remote pool's K is its own)."""
    if settings.upstreams("speculative"):
        return None
    return int(settings.engine_speculative_config()["num_speculative_tokens"])


def ngram_config(settings: Settings, engines: Mapping[Route, Engine]) -> NgramConfig | None:
    """The speculative engine's prompt lookup, for the draft replay; None if not ngram."""
    config = settings.engine_speculative_config()
    facts = [engine.facts for engine in engines.values()]
    if not all(fact.exposes_token_ids for fact in facts):
        return None
    max_model_len = min((fact.max_model_len or 0 for fact in facts), default=0)
    if config.get("method") != "ngram" or max_model_len <= 0:
        return None
    if not all(fact.draft_replay_matches for fact in facts):
        logger.warning(
            "the draft replay (shadow_drafting) is off: it replays the V1 model runner's "
            "n-gram proposer, and the speculative engine runs Model Runner V2, whose n-gram "
            "speculator differs "
            "(unset VLLM_USE_V2_MODEL_RUNNER to pin V1)"
        )
        return None
    return NgramConfig(
        k=int(config["num_speculative_tokens"]),
        min_n=int(config.get("prompt_lookup_min") or 1),
        max_n=int(config.get("prompt_lookup_max") or config.get("prompt_lookup_min") or 1),
        max_model_len=max_model_len,
    )


# Starts a gateway's engines, each registered on the stack for shutdown.
EngineStarter = Callable[[Settings, AsyncExitStack], Awaitable[dict[Route, Engine]]]


def create_app(
    settings: Settings,
    engines: Mapping[Route, Engine] | None = None,
    starter: EngineStarter | None = None,
) -> FastAPI:
    """The app. Given `engines` (a fake, in tests), it uses them; otherwise `starter` (Ray
    Serve's replicas) or its own embedded and remote engines start with it."""

    keys = LiveKeyRing(settings.api_key, settings.api_key_file)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            watching = asyncio.create_task(keys.watch())
            stack.callback(watching.cancel)
            ledger = open_ledger(settings)
            if ledger is not None:
                stack.callback(ledger.close)
            if engines is not None:
                running = dict(engines)
            elif starter is not None:
                running = await starter(settings, stack)
            else:
                from app.engine.start import start_engines

                running = await start_engines(settings, stack)
            app.state.gateway = build_gateway(settings, running, ledger, keys)
            try:
                yield
            finally:
                app.state.gateway = None

    app = FastAPI(
        title="specgate",
        summary="OpenAI-compatible gateway that routes each request to a speculative or a "
        "plain vLLM engine.",
        version="0.1.0",
        lifespan=lifespan,
        # Operation ids are the handlers' names: create_chat_completion, list_models, ...
        generate_unique_id_function=lambda route: route.name,
    )
    install_openapi(app)
    install_error_handlers(app)
    app.add_middleware(BodyGuard, max_body_bytes=settings.max_request_body_bytes)
    # Added last, so it runs first: strangers are refused before their body is read.
    app.add_middleware(ApiKeyGuard, keys=keys, protect_metrics=settings.metrics_need_key)
    for module in (
        chat,
        completions,
        responses,
        models,
        monitoring,
        routing_state,
        tokenize,
        usage,
    ):
        app.include_router(module.router)
    return app
