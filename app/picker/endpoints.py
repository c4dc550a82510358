"""The model servers the picker chooses among, read from a file.

    endpoints:
      - address: 10.0.0.7:8000     # ip:port, as Envoy's ORIGINAL_DST cluster dials it
        kind: specgate             # specgate (one engine, drafts per request) or vllm
        max_draft: 5               # specgate: its --num-speculative-tokens (the k it takes)
      - address: 10.0.0.8:8000
        kind: vllm
        pool: drafting             # vllm: started with a speculative config (or plain)

JSON with the same shape is read too (YAML is a superset). In a cluster the endpoints come
from an InferencePool instead (app/picker/kubernetes.py, `--pool-name`).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

Kind = Literal["specgate", "vllm"]
Pool = Literal["drafting", "plain"]


class Endpoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str = Field(description="ip:port of the model server")
    kind: Kind = "specgate"
    # Only vLLM servers are labelled: a specgate server drafts or not per request.
    pool: Pool | None = None
    # The longest draft the server verifies per step: specgate's K (it refuses a larger k=)
    # and a drafting vLLM server's num_speculative_tokens.
    max_draft: int = Field(default=5, ge=1)
    # Where its Prometheus text is served, on the same address.
    metrics_path: str = "/metrics"

    @field_validator("address")
    @classmethod
    def _ip_and_port(cls, address: str) -> str:
        # Envoy's ORIGINAL_DST cluster dials the header's value as it is: a name would not
        # resolve there, so it must be an IP literal with a port.
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{address!r} is not ip:port")
        ipaddress.ip_address(host.strip("[]"))
        return address

    @property
    def drafts(self) -> bool:
        """It can draft: a specgate server (per request) or a vLLM server of the drafting pool."""
        return self.kind == "specgate" or self.pool == "drafting"


class EndpointFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoints: list[Endpoint]


def load_endpoints(path: Path) -> list[Endpoint]:
    listed = EndpointFile.model_validate(yaml.safe_load(path.read_text()))
    addresses = [endpoint.address for endpoint in listed.endpoints]
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"{path}: an address is listed twice")
    return listed.endpoints
