"""A real redis-server for the tests of limits shared across processes: the system's, or the
one `make install` unpacked into the environment (scripts/install_redis_server.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis


def redis_server_binary() -> str | None:
    local = Path(sys.prefix) / "bin" / "redis-server"
    return str(local) if local.exists() else shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    def __init__(self, binary: str, folder: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(folder)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@contextmanager
def running_redis(folder: Path) -> Iterator[RedisServer]:
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server (make install unpacks Debian's where apt-get works)")
    server = RedisServer(binary, folder)
    try:
        yield server
    finally:
        server.stop()
