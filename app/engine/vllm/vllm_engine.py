"""The vLLM adapter: an `Engine` over vLLM's async engine.

vLLM is imported only under app/engine/vllm/: here, in what runs in vLLM's engine core
(core/) and workers (worker/), and the tool-call parsers (tool_parser.py); the gateway loads
this module only when it embeds an engine.

Each `VllmEngine` owns one `AsyncLLM` (vLLM V1's AsyncLLMEngine), whose engine core runs
in a child process. Requests go in as token ids, so both engines see the same prompt and
usage counts come from the tokens actually served.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from vllm import SamplingParams
from vllm.config import StructuredOutputsConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.exceptions import VLLMClientError
from vllm.platforms import current_platform
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError
from vllm.v1.metrics.stats import RequestSpecDecodeMetrics

from app.engine.generation import (
    ChoiceDelta,
    FinishReason,
    GenerationRequest,
    GenerationStep,
    PromptEcho,
    SamplingOptions,
    SuffixCacheCounts,
    TokenLogprob,
)
from app.engine.protocol import EngineFacts, StopsOnExit
from app.engine.refusals import drafting_refusal
from app.engine.sampling_table import engine_sampling, finish_reason
from app.engine.tokenizing import LocalTokenizer

# Loads the scheduler's module, whose import lets requests of draft length 0 past vLLM's
# refusal of min_p and logit_bias on speculative engines, here where requests are checked.
from app.engine.vllm.core.scheduler_choice import SCHEDULER_QUALNAME
from app.engine.vllm.engine_config import EngineConfig
from app.engine.vllm.extra_args import (
    ACCEPTANCE_PRIOR_KEY,
    CACHE_TOKENS_KEY,
    CLIENT_KEY,
    CLIENT_WEIGHT_KEY,
    DRAFT_LENGTH_KEY,
    PREDICTION_DRAFT_TOKENS_KEY,
    PREDICTION_KEY,
    STEP_COST_KEY,
    TENANT_KEY,
)
from app.engine.vllm.model_runner import RunnerFacts, pinned_runner, runner_of
from app.engine.vllm.prediction_tally import PredictionTally
from app.errors import (
    ContextLengthError,
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
)
from app.vocabulary import Refusal, Route, SpecDecodeStats

logger = logging.getLogger("specgate.engine")

# Loaded in every speculative engine's worker, and in every engine's on CPUs (its module's
# import installs the worker's changes: app/engine/vllm/worker/extension.py).
WORKER_EXTENSION_QUALNAME = "app.engine.vllm.worker.extension.WorkerExtension"
# Two engines share one machine; on CPUs sizing the KV cache by memory fraction is fragile
# (it subtracts the whole process's resident memory), so each gets a fixed budget.
CPU_KV_CACHE_BYTES = 512 * 1024 * 1024


def on_cpu() -> bool:
    return current_platform.is_cpu()


def engine_args(config: EngineConfig, model_path: str) -> AsyncEngineArgs:
    """vLLM engine arguments for one engine, with platform defaults applied."""
    on_cpu = current_platform.is_cpu()
    speculative = config.speculative_config is not None
    dtype = config.dtype
    if dtype == "auto" and on_cpu:
        # On AVX2-only CPUs bf16 is emulated; in fp32 the K+1-token verification pass is
        # cheap enough for speculation to pay (see docs/engines.md, "Engines on CPUs").
        dtype = "float32"
    kv_cache_bytes = config.kv_cache_memory_bytes
    if kv_cache_bytes is None and on_cpu:
        kv_cache_bytes = CPU_KV_CACHE_BYTES
    if kv_cache_bytes is not None and config.shared:
        kv_cache_bytes *= 2  # the budget is per route: one engine holds both
    enforce_eager = config.enforce_eager if config.enforce_eager is not None else on_cpu
    extra: dict[str, Any] = {}
    if config.speculative_config is not None:
        extra["speculative_config"] = dict(config.speculative_config)
        # "detailed": each verification step's draft length too (the usage's draft_lengths).
        extra["per_request_spec_decode_metrics"] = "detailed"
        # Each request's own draft length (GenerationRequest.draft_length), 0..K, under
        # whichever scheduling vLLM settles for the engine
        # (app/engine/vllm/core/scheduler_choice.py):
        # async scheduling, vLLM's single-GPU default for draft models and EAGLE, overlaps
        # the host's work with the GPU's step (about 1.2 ms a step on an H100).
        extra["scheduler_cls"] = SCHEDULER_QUALNAME
        # What specgate's scheduler and suffix drafter read in the engine's processes.
        additional: dict[str, Any] = {
            CACHE_TOKENS_KEY: config.suffix_cache_tokens,
            PREDICTION_DRAFT_TOKENS_KEY: config.prediction_draft_tokens,
        }
        if config.draft_step_cost:
            additional[STEP_COST_KEY] = list(config.draft_step_cost)
        extra["additional_config"] = additional
    if speculative or on_cpu:
        extra["worker_extension_cls"] = WORKER_EXTENSION_QUALNAME
    return AsyncEngineArgs(
        model=model_path,
        served_model_name=[config.model_id],
        dtype=dtype,  # type: ignore[arg-type]  # vLLM validates the name itself
        max_model_len=config.max_model_len,  # type: ignore[arg-type]  # None: the model's
        tensor_parallel_size=config.tensor_parallel_size,
        pipeline_parallel_size=config.pipeline_parallel_size,
        distributed_executor_backend=config.distributed_executor_backend,
        gpu_memory_utilization=config.memory_fraction,
        kv_cache_memory_bytes=kv_cache_bytes,
        enforce_eager=enforce_eager,
        load_format=config.load_format,
        # specgate keeps its own Prometheus metrics; vLLM's global registry cannot hold two engines.
        disable_log_stats=True,
        # With "auto", vLLM checks each schema for xgrammar and falls back to guidance per
        # request, but the engine core keeps the backend of its first structured request and
        # compiles every later one with it: a schema xgrammar refused then failed there, a
        # 500. One backend, checked before the engine core, refuses such a schema as a 400.
        structured_outputs_config=StructuredOutputsConfig(backend="xgrammar"),
        **extra,
    )


class VllmEngine(StopsOnExit):
    def __init__(self, llm: AsyncLLM, route: Route, runner: RunnerFacts) -> None:
        self.route: Route = route
        self._llm: AsyncLLM | None = llm
        config = llm.vllm_config.speculative_config
        # Its worker keeps suffix trees of earlier answers per tenant (suffix_drafter.py).
        self.drafts_from_suffix_trees = config is not None and config.method == "suffix"
        self._tokenizer = llm.get_tokenizer()
        self.max_model_len: int = llm.model_config.max_model_len
        # A speculative engine honours each request's draft_length; a plain one drafts none.
        self.per_request_draft_length: bool = llm.vllm_config.speculative_config is not None
        # What it can serve while drafting follows from the model runner its core got.
        self.facts = EngineFacts(
            max_model_len=self.max_model_len,
            exposes_token_ids=True,
            per_request_draft_length=self.per_request_draft_length,
            tokenizer=self._tokenizer,
            tokenizing=LocalTokenizer(self._tokenizer, self.max_model_len),
            draft_replay_matches=runner.draft_replay_matches,
            kv_capacity_tokens=kv_capacity_tokens(llm),
            applies_sampling_fields_at_drafts=runner.applies_sampling_fields_at_drafts,
        )

    @classmethod
    def start(cls, config: EngineConfig, model_path: str, route: Route) -> VllmEngine:
        """Build the engine; blocks until its core process is ready (tens of seconds)."""
        args = engine_args(config, model_path)
        name = "shared" if config.shared else route
        logger.info("starting the %s engine on %s", name, model_path)
        speculative = args.speculative_config is not None
        with pinned_runner(speculative):
            llm = AsyncLLM.from_engine_args(args)
            # Read while the environment the engine core was spawned with is in place.
            runner = runner_of(llm.vllm_config.use_v2_model_runner)
        async_scheduling = bool(llm.vllm_config.scheduler_config.async_scheduling)
        logger.info(
            "the %s engine: model runner %s, %s scheduling%s",
            name,
            runner.runner.upper(),
            "async" if async_scheduling else "synchronous",
            ", a draft length per request" if speculative else "",
        )
        return cls(llm, route, runner)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        # Everything the request could get wrong is checked here, before vLLM sees it.
        options = request.options
        prompt_ids = self._prompt_token_ids(request.prompt, request.tools)
        options = self._with_default_max_tokens(options, len(prompt_ids))
        self._check_context(len(prompt_ids), options.max_tokens)
        self._check_logit_bias(options.logit_bias)
        self._check_servable(options, request.draft_length)
        predicted = self._prediction_token_ids(request.prediction, len(prompt_ids))
        params = self._sampling_params(options)
        if self.per_request_draft_length:
            params.extra_args = draft_args(request, predicted)
        tally = None
        if predicted is not None:
            drafts = PREDICTION_KEY in (params.extra_args or {})
            tally = PredictionTally(predicted, drafts_from_it=drafts)
        stream = self._running().generate(
            {"prompt_token_ids": prompt_ids}, params, request_id=request.request_id
        )
        echo: PromptEcho | None = None
        echoed: set[int] = set()
        first = True
        try:
            async for output in stream:
                step_prompt_ids = tuple(prompt_ids) if first else None
                choices = [self._choice_delta(choice, options, first) for choice in output.outputs]
                if tally is not None:
                    tally.see(output)
                    if output.finished:
                        choices = [replace(c, prediction=tally.counts(output)) for c in choices]
                first = False
                if options.echo:
                    # The prompt's logprobs come once, on the request's first output.
                    echo = echo or self._echo(request.prompt, prompt_ids, output, options)
                    choices = [
                        choice if choice.index in echoed else replace(choice, echo=echo)
                        for choice in choices
                    ]
                    echoed.update(choice.index for choice in choices)
                yield GenerationStep(
                    prompt_tokens=len(prompt_ids),
                    choices=choices,
                    prompt_token_ids=step_prompt_ids,
                )
        except (VLLMClientError, ValueError) as exc:
            await self._forget(request.request_id)
            raise InvalidRequestError(str(exc)) from exc
        except EngineDeadError as exc:
            raise EngineUnavailableError(f"the {self.route} engine has stopped") from exc
        except EngineGenerateError as exc:
            await self._forget(request.request_id)
            raise EngineFailureError(f"the {self.route} engine failed: {exc.__cause__}") from exc
        finally:
            # Closing vLLM's generator early aborts the request inside the engine.
            await stream.aclose()

    async def _forget(self, request_id: str) -> None:
        # vLLM can register a request and then fail to add it; it would stay counted as
        # unfinished (read as load by the router) unless aborted. A no-op when it is gone.
        if self._llm is not None:
            with contextlib.suppress(Exception):
                await self._llm.abort(request_id)

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        # A request that drafts cannot have some sampling fields; one with draft length 0 (the
        # plain route of --engine-layout one) never drafts.
        if not self.per_request_draft_length:
            return None
        fields_at_drafts = self.facts.applies_sampling_fields_at_drafts
        return drafting_refusal(options, fields_at_drafts, draft_length)

    def unfinished_requests(self) -> int:
        return 0 if self._llm is None else self._llm.get_num_unfinished_requests()

    def is_alive(self) -> bool:
        return self._llm is not None and not self._llm.errored

    async def check_health(self) -> None:
        try:
            await self._running().check_health()
        except EngineDeadError as exc:
            raise EngineUnavailableError(f"the {self.route} engine has stopped") from exc

    async def suffix_cache_counts(self) -> SuffixCacheCounts | None:
        if not self.drafts_from_suffix_trees:
            return None
        answers = await self._running().collective_rpc("suffix_cache_counts")
        # One answer per worker (tensor-parallel rank): the first rank's speaks for the engine.
        first = answers[0] if answers else None
        return SuffixCacheCounts(**first) if isinstance(first, dict) else None

    async def aclose(self) -> None:
        if self._llm is None:
            return
        logger.info("stopping the %s engine", self.route)
        llm, self._llm = self._llm, None
        # As vLLM's own server stops its engine: its shutdown timeout, 0 unless set (abort,
        # then kill). By now the gateway has drained or cut its streams (--shutdown-grace-
        # seconds); a graceful stop waited 5 s per engine here, for an engine core that on
        # CPUs does not exit by itself once its workers have.
        llm.shutdown(timeout=llm.vllm_config.shutdown_timeout)
        # Dropping our reference frees the engine now. Left for interpreter exit, its
        # finalizer would run shutdown() again after vLLM's modules are torn down.
        del llm

    def _running(self) -> AsyncLLM:
        if self._llm is None:
            raise EngineUnavailableError(f"the {self.route} engine has stopped")
        return self._llm

    def _prompt_token_ids(
        self, prompt: str | list[int] | list[Any], tools: tuple[dict[str, Any], ...] | None = None
    ) -> list[int]:
        if isinstance(prompt, str):
            return list(self._tokenizer.encode(prompt))
        if all(isinstance(token, int) for token in prompt):
            vocab = len(self._tokenizer)
            if any(not 0 <= token < vocab for token in prompt):
                raise InvalidRequestError(
                    f"prompt token ids must lie in [0, {vocab})", param="prompt"
                )
            return list(prompt)
        try:
            text = self._tokenizer.apply_chat_template(
                list(prompt),
                # A template without tool support ignores them; the call is constrained anyway.
                tools=list(tools) if tools else None,
                add_generation_prompt=True,
                tokenize=False,
            )
        except Exception as exc:  # the template is model code; any failure is the request's
            raise InvalidRequestError(
                f"cannot apply the chat template: {exc}", param="messages"
            ) from exc
        # The template already wrote the special tokens it wants.
        return list(self._tokenizer.encode(str(text), add_special_tokens=False))

    def _check_servable(self, options: SamplingOptions, draft_length: int | None) -> None:
        # The gateway routes such requests where they can be served; this is the engine's
        # own guard for one that reaches it anyway.
        refused = self.servable(options, draft_length)
        if refused is not None:
            raise InvalidRequestError(
                f"{refused.names} cannot be used while drafting: vLLM does not apply them to "
                "drafted tokens; send X-Speculative: off or auto",
                param=refused.fields[0],
                code="unsupported_with_speculation",
            )

    def _check_logit_bias(self, logit_bias: dict[int, float] | None) -> None:
        vocab = len(self._tokenizer)
        outside = sorted(token for token in logit_bias or {} if not 0 <= token < vocab)
        if outside:
            raise InvalidRequestError(
                f"logit_bias names token ids outside the vocabulary [0, {vocab}): {outside[:5]}",
                param="logit_bias",
            )

    def _choice_delta(self, choice: Any, options: SamplingOptions, first: bool) -> ChoiceDelta:
        finish: FinishReason | None = None
        if choice.finish_reason is not None:
            if choice.finish_reason == "error":
                if first and options.json_schema is not None:
                    # A schema that passes vLLM's checks can still fail to compile in the
                    # engine core, or admit no output at all ({"anyOf": [{"$ref": "#"}]}):
                    # either ends the request at its first step. The schema is the client's.
                    raise InvalidRequestError(
                        "response_format: no output can be generated under this JSON schema",
                        param="response_format",
                    )
            finish = finish_reason(choice.finish_reason)
        logprobs = None
        if options.logprobs is not None and choice.logprobs is not None:
            logprobs = self._token_logprobs(choice.token_ids, choice.logprobs, options.logprobs)
        return ChoiceDelta(
            index=choice.index,
            text=choice.text,
            new_tokens=len(choice.token_ids),
            finish_reason=finish,
            draft_stats=_spec_stats(choice.spec_decode_metrics),
            logprobs=logprobs,
            token_ids=tuple(choice.token_ids),
        )

    def _echo(
        self, prompt: Any, prompt_ids: list[int], output: Any, options: SamplingOptions
    ) -> PromptEcho:
        text = prompt if isinstance(prompt, str) else str(self._tokenizer.decode(prompt_ids))
        logprobs = None
        if options.logprobs is not None and output.prompt_logprobs is not None:
            logprobs = self._token_logprobs(prompt_ids, output.prompt_logprobs, options.logprobs)
        return PromptEcho(text, logprobs)

    def _token_logprobs(
        self, token_ids: list[int], positions: Any, top: int
    ) -> tuple[TokenLogprob, ...]:
        """vLLM's per-position {token id: Logprob} maps, as TokenLogprobs."""
        entries = []
        for token_id, position in zip(token_ids, positions, strict=False):
            if position is None:  # the prompt's first token: nothing predicted it
                entries.append(TokenLogprob(self._token_text(token_id, None), None))
                continue
            chosen = position[token_id]
            best = sorted(position.items(), key=lambda item: -item[1].logprob)[:top]
            entries.append(
                TokenLogprob(
                    self._token_text(token_id, chosen.decoded_token),
                    _finite(chosen.logprob),
                    tuple(
                        (self._token_text(i, lp.decoded_token), _finite(lp.logprob))
                        for i, lp in best
                    ),
                )
            )
        return tuple(entries)

    def _token_text(self, token_id: int, decoded: str | None) -> str:
        return decoded if decoded is not None else str(self._tokenizer.decode([token_id]))

    def _with_default_max_tokens(
        self, options: SamplingOptions, prompt_tokens: int
    ) -> SamplingOptions:
        # The server's default for an absent max_tokens, cut to what the context leaves, so
        # a long prompt still gets "as many as fit" rather than a context-length error.
        left = self.max_model_len - prompt_tokens
        if options.max_tokens is not None or not options.default_max_tokens or left < 1:
            return options
        return replace(options, max_tokens=min(options.default_max_tokens, left))

    def _prediction_token_ids(self, prediction: str | None, prompt_tokens: int) -> list[int] | None:
        """The prediction as the answer would be tokenised; it counts against the context
        (an answer cannot be longer than what the context leaves)."""
        if prediction is None:
            return None
        tokens = list(self._tokenizer.encode(prediction, add_special_tokens=False))
        room = self.max_model_len - prompt_tokens
        if len(tokens) > room:
            raise InvalidRequestError(
                f"The prediction is {len(tokens)} tokens; the context leaves {room} after the "
                f"prompt's {prompt_tokens} (this model's maximum context length is "
                f"{self.max_model_len} tokens).",
                param="prediction",
            )
        return tokens

    def _check_context(self, prompt_tokens: int, max_tokens: int | None) -> None:
        wanted = prompt_tokens + (max_tokens or 1)
        if wanted > self.max_model_len:
            raise ContextLengthError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"The request needs {wanted} ({prompt_tokens} in the prompt, "
                f"{max_tokens or 1} to generate).",
                param="messages" if max_tokens is None else "max_tokens",
            )

    @staticmethod
    def _sampling_params(options: SamplingOptions) -> SamplingParams:
        fields = engine_sampling(options)
        structured = fields.pop("structured_outputs")
        try:
            return SamplingParams(
                **fields,
                structured_outputs=StructuredOutputsParams(**structured) if structured else None,
                output_kind=RequestOutputKind.DELTA,
            )
        except (VLLMClientError, ValueError) as exc:
            raise InvalidRequestError(str(exc), param=getattr(exc, "parameter", None)) from exc


def draft_args(
    request: GenerationRequest, predicted: list[int] | None = None
) -> dict[str, Any] | None:
    """What the speculative engine's scheduler and worker read of a request's drafting."""
    args: dict[str, Any] = {}
    if predicted and request.draft_length != 0:
        args[PREDICTION_KEY] = predicted
    if request.draft_length is not None:
        args[DRAFT_LENGTH_KEY] = request.draft_length
    if request.acceptance_prior is not None:
        args[ACCEPTANCE_PRIOR_KEY] = request.acceptance_prior
    if request.tenant is not None:
        args[TENANT_KEY] = request.tenant
    if request.client is not None:
        args[CLIENT_KEY] = request.client
        args[CLIENT_WEIGHT_KEY] = request.client_weight
    return args or None


def _finite(logprob: float) -> float:
    # JSON has no -inf; OpenAI reports "very unlikely" as -9999.0.
    return max(logprob, -9999.0)


def _spec_stats(metrics: RequestSpecDecodeMetrics | None) -> SpecDecodeStats | None:
    if metrics is None:
        return None
    lengths = [0] * metrics.num_spec_tokens
    for drafted in metrics.per_step_drafted:
        if 0 < drafted <= len(lengths):
            lengths[drafted - 1] += 1
    return SpecDecodeStats(
        drafts=sum(metrics.histogram),
        draft_tokens=metrics.num_draft_tokens,
        accepted_tokens=sum(accepted * count for accepted, count in enumerate(metrics.histogram)),
        draft_lengths=tuple(lengths) if metrics.per_step_drafted else (),
        acceptance_histogram=tuple(metrics.histogram),
        spec_tokens=metrics.num_spec_tokens,
    )


def kv_capacity_tokens(llm: AsyncLLM) -> int | None:
    """Tokens the engine's KV cache holds: its blocks (known once the core has started)
    times their size."""
    cache = llm.vllm_config.cache_config
    blocks = cache.num_gpu_blocks
    return int(blocks * cache.block_size) if blocks else None
