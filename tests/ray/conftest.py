"""A real local Ray cluster for the package (one per test session): `ray.init` with a few
logical CPUs, no dashboard, a capped object store; Serve's HTTP proxy on a free port. Each
module deploys its own specgate application on it and deletes it when done.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import ray
from ray import serve

from app.serve_ray.app import application
from app.serve_ray.deploy import APP_NAME
from app.serve_ray.replica import EngineRecipe
from app.settings import Settings

# The replicas' actors are named SERVE_REPLICA::<app>#<deployment>#<id>.
REPLICA_PREFIX = f"SERVE_REPLICA::{APP_NAME}#engine#"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    base_url: str

    def deploy(self, settings: Settings, recipe: EngineRecipe | None = None) -> None:
        serve.run(application(settings, recipe), name=APP_NAME, route_prefix="/")

    def undeploy(self) -> None:
        serve.delete(APP_NAME)

    def replicas(self) -> dict[str, Any]:
        """The engine replicas' actors alive now, by name."""
        named = ray.util.list_named_actors(all_namespaces=True)
        found = {}
        for entry in named:
            if entry["name"].startswith(REPLICA_PREFIX):
                try:
                    found[entry["name"]] = ray.get_actor(
                        entry["name"], namespace=entry["namespace"]
                    )
                except ValueError:  # gone between the listing and the lookup
                    continue
        return found

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each live replica's routing report, as the router reads it."""
        out = {}
        for name, actor in self.replicas().items():
            try:
                out[name] = ray.get(actor.record_routing_stats.remote(), timeout=10)
            except ray.exceptions.RayError:
                continue
        return out

    def wait_for_replicas(self, count: int, seconds: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = serve.status().applications.get(APP_NAME)
            if status is not None and status.status == "RUNNING":
                replicas = self.replicas()
                if len(replicas) == count:
                    return replicas
            time.sleep(0.5)
        raise AssertionError(f"{count} replicas did not come up in {seconds} s: {serve.status()}")

    def health(self) -> httpx.Response:
        return httpx.get(f"{self.base_url}/health", timeout=30)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    ray.init(
        num_cpus=8,
        include_dashboard=False,
        object_store_memory=256 * 1024**2,
        log_to_driver=False,
    )
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield Cluster(f"http://127.0.0.1:{port}")
    finally:
        serve.shutdown()
        ray.shutdown()
