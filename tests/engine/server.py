"""A real specgate server process (`python -m app`), as users start it, through the launcher
the benchmarks use (bench/servers.py): its own process group, its log, /health, and a stop
that leaves nothing behind."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.servers import ServerProcess as LaunchedServer
from bench.servers import module_spec
from tests.metrics_text import sample

REPO = Path(__file__).resolve().parents[2]


class ServerProcess(LaunchedServer):
    def __init__(self, args: list[str], log_path: Path, module: str = "app") -> None:
        """`python -m module *args --port P`: specgate, or another server such as vLLM's."""
        super().__init__(module_spec(module, args, REPO), log_path)

    def metric(self, name: str, **labels: str) -> float:
        """One sample from /metrics; 0 for a labelled series not yet created."""
        return sample(httpx.get(f"{self.base_url}/metrics", timeout=10).text, name, **labels)


@contextlib.contextmanager
def package_server(args: list[str], log_path: Path) -> Iterator[ServerProcess]:
    """A specgate server for a test package: ready on entry; on exit stopped by SIGTERM, and
    it must exit cleanly with no engine process left behind."""
    process = ServerProcess(args, log_path)
    process.wait_ready()
    print(f"\nspecgate {' '.join(args)} ready in {process.startup_s:.1f} s (log: {log_path})")
    yield process
    survivors = process.stop(signal.SIGTERM)
    # uvicorn re-raises the signal after a graceful shutdown: -SIGTERM is a clean exit.
    assert process.process.returncode in (0, -signal.SIGTERM), process.log_tail()
    assert "Application shutdown complete" in process.log_tail()
    assert not survivors, f"engine processes outlived SIGTERM: {survivors}"
