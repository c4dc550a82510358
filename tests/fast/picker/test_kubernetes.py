"""Endpoints from an InferencePool, against a stand-in for the API server (httpx's
MockTransport answering the two calls the source makes)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from app.drafting.length_rule import GPU_STEP_PRIOR
from app.picker.endpoints import Endpoint
from app.picker.kubernetes import PoolSource
from app.picker.load import EndpointLoad, LoadBook
from app.picker.picker import Picker

POOL = {
    "apiVersion": "inference.networking.k8s.io/v1",
    "kind": "InferencePool",
    "spec": {
        "selector": {"matchLabels": {"app": "specgate", "tier": "serve"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {"name": "specgate-picker", "port": {"number": 9002}},
    },
}


def pod(ip: str, ready: bool = True, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pod-{ip}", "labels": {"app": "specgate", **labels}},
        "status": {
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


class ApiServer:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.selectors: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools/pool":
            return httpx.Response(200, json=POOL)
        if path == "/api/v1/namespaces/ns/pods":
            self.selectors.append(request.url.params["labelSelector"])
            return httpx.Response(200, content=json.dumps({"items": self.pods}))
        return httpx.Response(404, json={"kind": "Status", "code": 404})


def source(server: ApiServer, client: httpx.AsyncClient, kind: str = "specgate") -> PoolSource:
    return PoolSource(client, "pool", "ns", kind, "specgate.io/pool", 4)  # type: ignore[arg-type]


async def test_the_pools_ready_pods_are_its_endpoints() -> None:
    server = ApiServer([pod("10.0.0.1"), pod("10.0.0.2", ready=False), pod("fd00::3")])
    async with httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="https://k") as c:
        found = await source(server, c).endpoints()
    assert server.selectors == ["app=specgate,tier=serve"]
    assert found == [
        Endpoint(address="10.0.0.1:8000", max_draft=4),
        Endpoint(address="[fd00::3]:8000", max_draft=4),
    ]


async def test_vllm_pods_say_their_pool_with_a_label() -> None:
    server = ApiServer([pod("10.0.0.1", **{"specgate.io/pool": "drafting"}), pod("10.0.0.2")])
    async with httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="https://k") as c:
        found = await source(server, c, kind="vllm").endpoints()
    assert [(e.kind, e.pool) for e in found] == [("vllm", "drafting"), ("vllm", None)]


async def test_a_pool_that_is_not_there_is_an_error() -> None:
    def missing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(missing), base_url="https://k") as c:
        with pytest.raises(httpx.HTTPStatusError):
            await source(ApiServer([]), c).endpoints()


async def test_pods_coming_and_going_change_what_the_picker_picks_from() -> None:
    server = ApiServer([pod("10.0.0.1")])
    picker = Picker([], LoadBook([]), GPU_STEP_PRIOR)
    async with httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="https://k") as c:
        listing = asyncio.create_task(source(server, c).run(picker.set_endpoints, 0.01))
        try:
            await _until(lambda: "10.0.0.1:8000" in picker.endpoints)
            server.pods = [pod("10.0.0.2")]
            await _until(lambda: list(picker.endpoints) == ["10.0.0.2:8000"])
        finally:
            listing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await listing
    # A new endpoint waits for its first scrape; the gone one is forgotten.
    assert not picker.book.ready("10.0.0.2:8000")
    picker.book.record("10.0.0.1:8000", EndpointLoad(), scrape_began=0.0)
    assert picker.book.load("10.0.0.1:8000") is None


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)
