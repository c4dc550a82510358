"""What a vLLM server says about itself in /metrics."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.server import ServerProcess


def running_requests(server: ServerProcess) -> float:
    """Requests the vLLM server is generating for now (all of its engines together)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    return sum(
        found.value
        for family in text_string_to_metric_families(text)
        for found in family.samples
        if found.name == "vllm:num_requests_running"
    )
