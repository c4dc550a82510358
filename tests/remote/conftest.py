"""Remote pools for real: two vLLM OpenAI servers on this machine and a specgate in front.

The speculative upstream drafts with ngram prompt lookup and reports per-request
speculative figures; the plain upstream does not draft. specgate runs no engine of its own.
The servers are shared by the package and stopped, every process of them, when it ends.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from app.embedded_model import MODEL_NAME, prepare_embedded_model
from app.settings import Settings
from tests.engine.server import ServerProcess

NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
         "prompt_lookup_max": 5}  # fmt: skip


@dataclass
class Site:
    speculative: ServerProcess  # a vLLM server
    plain: ServerProcess  # a vLLM server
    gateway: ServerProcess  # specgate, with both routes remote

    def client(self, server: ServerProcess) -> OpenAI:
        return OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0, timeout=300)


def vllm_server(model: Path, speculative: bool, log: Path) -> ServerProcess:
    # The settings specgate's embedded engines use on CPUs (docs/engines.md, "Engines on CPUs").
    args = [
        "--model", str(model), "--served-model-name", MODEL_NAME,
        "--dtype", "float32", "--enforce-eager", "--kv-cache-memory-bytes", str(512 * 1024**2),
    ]  # fmt: skip
    if speculative:
        args += ["--speculative-config", json.dumps(NGRAM),
                 "--per-request-spec-decode-metrics", "summary"]  # fmt: skip
    return ServerProcess(args, log, module="vllm.entrypoints.openai.api_server")


@pytest.fixture(scope="package")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    logs = tmp_path_factory.mktemp("remote")
    model = prepare_embedded_model(Settings().cache_dir / "models")
    servers: list[ServerProcess] = []
    try:
        speculative = vllm_server(model, True, logs / "vllm-speculative.log")
        servers.append(speculative)
        plain = vllm_server(model, False, logs / "vllm-plain.log")
        servers.append(plain)
        # Both start at once: start-up is mostly waiting on imports and the engine core.
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(ServerProcess.wait_ready, (speculative, plain)))
        gateway = ServerProcess(
            [
                "--speculative-upstreams", f"{speculative.base_url}/v1",
                "--plain-upstreams", plain.base_url,
                "--routing-exploration", "0",
                "--upstream-health-interval", "1",
            ],
            logs / "specgate.log",
        )  # fmt: skip
        servers.append(gateway)
        gateway.wait_ready()
        print(
            f"\nupstreams ready in {max(speculative.startup_s, plain.startup_s):.1f} s,"
            f" specgate in {gateway.startup_s:.1f} s (logs: {logs})"
        )
        yield Site(speculative, plain, gateway)
    finally:
        survivors = [p for server in reversed(servers) for p in server.stop(signal.SIGTERM)]
    assert not survivors, f"processes outlived their server: {survivors}"
