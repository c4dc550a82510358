"""The picker's settings: CLI flags and SPECGATE_PICKER_* variables (pydantic-settings).

Apart from the gateway's `Settings`: the picker serves no model and starts no engine, and a
flag of one would only confuse the other's --help.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.picker.endpoints import Kind

# The endpoint-picker protocol's names (gateway-api-inference-extension, proposal 004).
DESTINATION_HEADER = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
SERVED_KEY = "x-gateway-destination-endpoint-served"

DEFAULT_QUEUE_LIMIT = 32


class PickerSettings(BaseSettings):
    """specgate picker: an Envoy ext_proc endpoint picker that knows when drafting pays."""

    model_config = SettingsConfigDict(
        env_prefix="SPECGATE_PICKER_",
        cli_prog_name="python -m app.picker",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_avoid_json=True,
        extra="ignore",
    )

    # The model servers: a file, or an InferencePool read from the Kubernetes API.
    endpoints: Path | None = Field(
        None, description="YAML or JSON file listing the model servers (address, kind, pool)"
    )
    pool_name: str | None = Field(
        None, description="InferencePool whose ready pods are the endpoints (in a cluster)"
    )
    pool_namespace: str | None = Field(
        None, description="The InferencePool's namespace (default: the picker's own)"
    )
    # A pool's pods all run one server; vLLM pods say their pool with a label.
    pool_kind: Kind = Field("specgate", description="What the pool's pods run: specgate or vllm")
    pool_label: str = Field(
        "specgate.io/pool",
        description="Pod label saying a vLLM pod's pool (drafting or plain)",
    )
    pool_max_draft: int = Field(
        5, ge=1, description="Longest draft the pool's servers verify per step (their K)"
    )
    pool_poll_s: float = Field(5.0, gt=0, description="Seconds between two listings of the pool")
    host: str = Field("0.0.0.0", description="Address the gRPC server listens on")
    # 9002: the port GAIE's own picker and its example manifests use.
    port: int = Field(9002, ge=0, le=65535, description="gRPC port (ext_proc and health)")
    # GAIE's picker refreshes every 50 ms; specgate's /metrics does a little more work (it
    # asks its engines first), so a little slower. Picks between two scrapes still count:
    # app/picker/load.py keeps them until a scrape that saw them.
    scrape_interval_s: float = Field(
        0.1, gt=0, description="Seconds between two scrapes of each endpoint's /metrics"
    )
    scrape_timeout_s: float = Field(1.0, gt=0, description="Seconds a scrape may take")
    # specgate's --metrics-need-key servers ask for one of their API keys.
    metrics_api_key: SecretStr | None = Field(
        None, description="Bearer key sent with each scrape, where /metrics needs one"
    )
    # A queue this long on every endpoint the request may use: it is refused with 429 rather
    # than added to one (the protocol's "sheddable request under heavy load").
    queue_limit: int = Field(
        DEFAULT_QUEUE_LIMIT,
        ge=1,
        description="Waiting requests past which an endpoint counts as saturated",
    )
    # The protocol lets the picker name fallbacks after its choice (ip:port,ip:port), for a
    # data plane that retries down the list. Envoy's ORIGINAL_DST cluster dials the header
    # as one address and finds no host in a list: none by default.
    fallbacks: int = Field(
        0, ge=0, description="Endpoints named after the chosen one, for the data plane's retries"
    )
    # How the rule prices a step where an endpoint has not said: vLLM reports no step
    # times, so the line is the device's prior (app/drafting/length_rule.py).
    step_cost: Literal["gpu", "cpu"] = Field(
        "gpu", description="Step-cost prior the endpoints are priced by"
    )
    # A request hotter than this is sent without drafting (sampling far from greedy lands
    # few drafts). None: no ceiling.
    max_speculative_temperature: float | None = Field(
        None, ge=0, description="Temperature above which requests are not drafted"
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level")

    @model_validator(mode="after")
    def _one_source(self) -> PickerSettings:
        if (self.endpoints is None) == (self.pool_name is None):
            raise ValueError("give the endpoints as --endpoints FILE or --pool-name NAME (one)")
        return self
