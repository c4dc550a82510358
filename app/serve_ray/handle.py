"""The gateway's engine when its engines are Ray Serve replicas (app/serve_ray/replica.py).

Both routes are this one engine, as in the `one` layout: the replicas take a draft length per
request. Each request streams through Serve's deployment handle, and specgate's request router
(app/serve_ray/router.py) picks the replica. A replica that dies before it has sent anything
leaves the request free to go to another: it is retried; once a step has reached the client, a
failure ends the stream with an error (the HTTP layer closes it with an error event and
[DONE]). Closing the stream early cancels the replica's request, which aborts it in the engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import ray
from ray import serve
from ray.exceptions import RayError, RayTaskError
from ray.serve.exceptions import BackPressureError

from app.engine.generation import (
    GenerationRequest,
    GenerationStep,
    SamplingOptions,
    SuffixCacheCounts,
)
from app.engine.protocol import EngineFacts, StopsOnExit
from app.engine.refusals import drafting_refusal
from app.errors import EngineFailureError, EngineUnavailableError, SpecgateError
from app.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
    TokenizerInfo,
)
from app.serve_ray.replica import ReplicaFacts
from app.vocabulary import ChatMessage, Refusal, Route

logger = logging.getLogger("specgate.serve")
Answer = TypeVar("Answer")

# Seconds before trying another replica, doubled each time: Serve's controller takes a moment
# to drop a dead replica from the routers' view.
RETRY_BACKOFF_S = 0.5


def _own_error(exc: BaseException) -> SpecgateError | None:
    """The gateway's own error a replica raised (Serve hands it back wrapped), if any."""
    if isinstance(exc, SpecgateError):
        return exc
    cause = exc.cause if isinstance(exc, RayTaskError) else None
    return cause if isinstance(cause, SpecgateError) else None


def _tokenizer(model_path: str | None) -> Any:
    """The model's tokenizer, where the replicas' model folder is readable here (the chat
    template picks the tool-call parser); None elsewhere: tool calls then use specgate's own
    envelope, as an all-remote gateway does."""
    if model_path is None or not os.path.isdir(model_path):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


class HandleTokenizer:
    """/tokenize and its kin, answered by a replica's engine."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def tokenize(
        self, request: TokenizeRequest, messages: list[ChatMessage] | None
    ) -> TokenizeResponse:
        return await self._call(TokenizeResponse, "tokenize", request, messages)

    async def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        return await self._call(DetokenizeResponse, "detokenize", request)

    async def tokenizer_info(self) -> TokenizerInfo:
        return await self._call(TokenizerInfo, "tokenizer_info")

    async def _call(self, shape: type[Answer], method: str, *args: Any) -> Answer:
        try:
            answer = await getattr(self._handle, method).remote(*args)
            assert isinstance(answer, shape)
            return answer
        except RayError as exc:
            own = _own_error(exc)
            if own is not None:
                raise own from exc
            raise EngineUnavailableError(f"no replica answered {method}: {exc}") from exc


class HandleEngine(StopsOnExit):
    route: Route = "speculative"

    def __init__(
        self, handle: Any, facts: ReplicaFacts, attempts: int, tokenizer: Any = None
    ) -> None:
        self._handle = handle
        # Serve names each replica's actor SERVE_REPLICA::<application>#<deployment>#<id>.
        self._replica_prefix = f"SERVE_REPLICA::{handle.app_name}#{handle.deployment_name}#"
        self._attempts = attempts
        self._streaming = handle.options(stream=True)
        self._unfinished = 0
        self._closed = False
        self.facts = EngineFacts(
            max_model_len=facts.max_model_len,
            exposes_token_ids=facts.exposes_token_ids,
            per_request_draft_length=facts.per_request_draft_length,
            tokenizer=tokenizer,
            tokenizing=HandleTokenizer(handle) if facts.has_tokenizer else None,
            draft_replay_matches=facts.draft_replay_matches,
            applies_sampling_fields_at_drafts=facts.applies_sampling_fields_at_drafts,
        )

    @classmethod
    async def connect(cls, handle: Any, attempts: int = 3) -> HandleEngine:
        """The engine over the deployment `handle`, once a replica has told its facts."""
        facts: ReplicaFacts = await handle.facts.remote()
        return cls(handle, facts, attempts, await asyncio.to_thread(_tokenizer, facts.model_path))

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        self._unfinished += 1
        try:
            for attempt in range(self._attempts):
                stream = self._streaming.generate.remote(request)
                sent = False
                try:
                    async for step in stream:
                        sent = True
                        yield step
                    return
                except (RayError, BackPressureError) as exc:
                    own = _own_error(exc)
                    if own is not None:
                        raise own from exc
                    if sent:
                        raise EngineFailureError(
                            "the replica serving this request failed part-way through"
                        ) from exc
                    if attempt + 1 == self._attempts:
                        raise EngineUnavailableError(
                            f"no replica could take the request after {self._attempts} tries"
                        ) from exc
                    logger.warning(
                        "request %s: replica failed before its first token (%s); retrying",
                        request.request_id,
                        type(exc).__name__,
                    )
                    await asyncio.sleep(RETRY_BACKOFF_S * 2**attempt)
                finally:
                    stream.cancel()
        finally:
            self._unfinished -= 1

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        # Every replica runs the same engine, so their facts answer for all of them here,
        # with no round trip (the router asks this of every request).
        if not self.facts.per_request_draft_length:
            return None
        return drafting_refusal(options, self.facts.applies_sampling_fields_at_drafts, draft_length)

    def unfinished_requests(self) -> int:
        return self._unfinished

    def is_alive(self) -> bool:
        return not self._closed

    async def check_health(self) -> None:
        status = await asyncio.to_thread(serve.status)  # a blocking call to Serve's controller
        # This application's deployments only: others may share the cluster.
        found = status.applications.get(self._handle.app_name)
        deployments = found.deployments.items() if found is not None else ()
        unhealthy = [
            f"{name}: {deployment.status}"
            for name, deployment in deployments
            if deployment.status not in ("HEALTHY", "UPSCALING", "DOWNSCALING")
        ]
        if unhealthy:
            raise EngineUnavailableError("replicas not healthy: " + ", ".join(unhealthy))

    async def replica_reports(self) -> dict[str, dict[str, Any]]:
        """Every live engine replica's routing report. Serve's handle reaches one replica a
        call, so each replica's actor is asked by name."""
        prefix = self._replica_prefix
        # Ray's lookups block on its control store: off the event loop.
        named = await asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True)
        reports: dict[str, dict[str, Any]] = {}
        for entry in named:
            name = entry["name"]
            if not name.startswith(prefix):
                continue
            try:
                actor = await asyncio.to_thread(ray.get_actor, name, entry["namespace"])
                reports[name.removeprefix(prefix)] = await actor.record_routing_stats.remote()
            except (RayError, ValueError):  # gone since the listing
                continue
        return reports

    async def suffix_cache_counts(self) -> SuffixCacheCounts | None:
        counts = await self._handle.suffix_cache_counts.remote()
        return SuffixCacheCounts(**counts) if counts else None

    async def aclose(self) -> None:
        self._closed = True
