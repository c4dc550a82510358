"""A real specgate server process (`python -m app`), as users start it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from tests.metrics_text import sample

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 900
STOP_TIMEOUT_SECONDS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    def __init__(self, args: list[str], log_path: Path, module: str = "app") -> None:
        """`python -m module --port P *args`: specgate, or another server such as vLLM's."""
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(self.port), *args],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.startup_seconds = 0.0

    def wait_ready(self) -> None:
        started = time.monotonic()
        while time.monotonic() - started < START_TIMEOUT_SECONDS:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited during start-up:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    self.startup_seconds = time.monotonic() - started
                    return
            except httpx.TransportError:
                pass
            time.sleep(1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"server not ready in {START_TIMEOUT_SECONDS} s:\n{self.log_tail()}")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> list[psutil.Process]:
        """Send `sig`, wait for exit, and return the descendants still alive afterwards."""
        children = self.descendants()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        # Give exiting children a moment to be reaped; survivors are what the caller checks.
        _, alive = psutil.wait_procs(children, timeout=10)
        for child in alive:
            child.kill()
        return alive

    def kill(self) -> None:
        """SIGKILL the server and every process under it at once, as a crashed node would go."""
        processes = [*self.descendants(), psutil.Process(self.process.pid)]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(processes, timeout=30)
        self.process.wait()

    def log_tail(self, lines: int = 60) -> str:
        if not self._log.closed:
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def metric(self, name: str, **labels: str) -> float:
        """One sample from /metrics; 0 for a labelled series not yet created."""
        return sample(httpx.get(f"{self.base_url}/metrics", timeout=10).text, name, **labels)


@contextlib.contextmanager
def package_server(args: list[str], log_path: Path) -> Iterator[ServerProcess]:
    """A specgate server for a test package: ready on entry; on exit stopped by SIGTERM, and
    it must exit cleanly with no engine process left behind."""
    process = ServerProcess(args, log_path)
    process.wait_ready()
    print(f"\nspecgate {' '.join(args)} ready in {process.startup_seconds:.1f} s (log: {log_path})")
    yield process
    survivors = process.stop(signal.SIGTERM)
    # uvicorn re-raises the signal after a graceful shutdown: -SIGTERM is a clean exit.
    assert process.process.returncode in (0, -signal.SIGTERM), process.log_tail()
    assert "Application shutdown complete" in process.log_tail()
    assert not survivors, f"engine processes outlived SIGTERM: {survivors}"
