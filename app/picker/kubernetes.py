"""Endpoints from the Kubernetes API: an InferencePool's selector and target ports, and the
pods it selects that are ready, as GAIE's own picker takes them (`--pool-name`).

Polled, not watched: a list every few seconds is one request, where a watch must be resumed
after every disconnect and its resource versions kept. A pod's readiness takes seconds to
change anyway, and a new endpoint is not used before its first scrape.

In-cluster only: the pod's service-account token and CA, where every pod has them. The
token is read again for each call (bound tokens rotate). The Role it needs, get on
inferencepools and list on pods in the pool's namespace, is in deploy/gaie/.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from app.picker.endpoints import Endpoint, Kind

logger = logging.getLogger("specgate.picker")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
POOLS = "/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/{name}"
PODS = "/api/v1/namespaces/{namespace}/pods"
POOL_VALUES = ("drafting", "plain")


class PoolSource:
    def __init__(
        self,
        client: httpx.AsyncClient,
        name: str,
        namespace: str,
        kind: Kind,
        pool_label: str,
        max_draft: int,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.kind: Kind = kind
        # The pod label that says a vLLM server's pool (drafting or plain).
        self.pool_label = pool_label
        self.max_draft = max_draft

    async def endpoints(self) -> list[Endpoint]:
        """The pool's ready pods, one endpoint per target port; httpx.HTTPError or
        ValueError when the API cannot say."""
        pool = await self._get(POOLS.format(namespace=self.namespace, name=self.name))
        spec = pool.get("spec", {})
        labels: Mapping[str, str] = spec.get("selector", {}).get("matchLabels", {})
        ports = [int(port["number"]) for port in spec.get("targetPorts", [])]
        if not labels or not ports:
            raise ValueError(f"InferencePool {self.name} has no selector or no target port")
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        pods = await self._get(
            PODS.format(namespace=self.namespace), params={"labelSelector": selector}
        )
        found = []
        for pod in pods.get("items", []):
            ip = pod.get("status", {}).get("podIP")
            if not ip or not _ready(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            label = pod["metadata"].get("labels", {}).get(self.pool_label)
            labelled = label if self.kind == "vllm" and label in POOL_VALUES else None
            host = f"[{ip}]" if ":" in ip else ip
            found += [
                Endpoint(
                    address=f"{host}:{port}",
                    kind=self.kind,
                    pool=labelled,
                    max_draft=self.max_draft,
                )
                for port in ports
            ]
        return found

    async def run(self, apply: Callable[[list[Endpoint]], None], interval_s: float) -> None:
        """Lists the pool every `interval_s` and applies what it finds; a failed list keeps
        the last one (the API server's hiccup is not the pods')."""
        listed: list[Endpoint] | None = None
        while True:
            try:
                found = await self.endpoints()
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                logger.warning("listing InferencePool %s failed: %s", self.name, exc)
            else:
                if found != listed:
                    logger.info("InferencePool %s: %d endpoints", self.name, len(found))
                    apply(found)
                    listed = found
            await asyncio.sleep(interval_s)

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        response = await self.client.get(path, params=params)
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def in_cluster_client(account: Path = SERVICE_ACCOUNT) -> httpx.AsyncClient:
    """A client of the API server, as the pod's service account; OSError outside a cluster."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    host = f"[{host}]" if ":" in host else host

    async def authorize(request: httpx.Request) -> None:
        request.headers["authorization"] = f"Bearer {(account / 'token').read_text().strip()}"

    hooks: dict[str, list[Callable[[httpx.Request], Awaitable[None]]]] = {"request": [authorize]}
    return httpx.AsyncClient(
        base_url=f"https://{host}:{port}", verify=context, event_hooks=hooks, timeout=10
    )


def own_namespace(account: Path = SERVICE_ACCOUNT) -> str:
    return (account / "namespace").read_text().strip()
