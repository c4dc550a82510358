"""Start one server at a time, wait for /health, and stop it with all its processes.

Memory is tight (two fp32 engines need most of NUMA node 0), so servers never overlap. vLLM's
engine cores run in child processes that can outlive a parent stopped by SIGTERM alone, so
every descendant seen while the server ran is tracked and stopped too. Only processes this
runner started are ever signalled.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.engine.cpu_cores import NUMBA_DEFAULTS

logger = logging.getLogger("bench.servers")

NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 5,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 5,
}


class ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class ServerSpec:
    name: str
    argv: list[str]  # without --port, which is chosen at start
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment


@dataclass
class RunningServer:
    spec: ServerSpec
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float = 0.0
    tracked: dict[int, psutil.Process] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def specgate_spec(repo: Path, extra_args: list[str], name: str = "specgate") -> ServerSpec:
    return ServerSpec(name, [sys.executable, "-m", "app", *extra_args], repo)


def whole_machine_env() -> dict[str, str]:
    """vLLM's CPU binding with every core computing and none reserved (its default reserves
    one for the scheduler): what specgate's one engine gets."""
    cores = ",".join(str(core) for core in sorted(os.sched_getaffinity(0)))
    return {"VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}


def vllm_spec(
    model_dir: Path,
    served_name: str,
    speculative: bool | dict[str, Any],
    extra_args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    name: str | None = None,
) -> ServerSpec:
    """`speculative`: False, True (ngram K=5), or a whole --speculative-config."""
    # The same engine settings specgate uses on CPUs, so only the gateway differs.
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--dtype",
        "float32",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(512 * 1024 * 1024),
    ]
    env = dict(env or {})
    if speculative:
        config = NGRAM_CONFIG if speculative is True else speculative
        argv += ["--speculative-config", json.dumps(config)]
        # The numba setting specgate gives its engines (app/engine/cpu_cores.py): without it
        # vLLM's own ngram proposer slows every later step, so the baseline gets it too.
        env = {**NUMBA_DEFAULTS, **env}
    name = name or ("vllm-spec" if speculative else "vllm-plain")
    return ServerSpec(name, argv + extra_args, cwd, env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(
    spec: ServerSpec, port: int, log_dir: Path, startup_timeout_s: float
) -> Iterator[RunningServer]:
    """Run the server for the duration of the block; it is stopped however the block ends."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.name}.log"
    argv = [*spec.argv, "--port", str(port)]
    logger.info("starting %s: %s (log: %s)", spec.name, " ".join(argv), log_path)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=spec.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **spec.env},
        )
    server = RunningServer(spec, port, process, log_path)
    try:
        server.startup_s = _wait_healthy(server, startup_timeout_s)
        logger.info("%s healthy after %.1f s", spec.name, server.startup_s)
        yield server
    finally:
        stop(server)


def _wait_healthy(server: RunningServer, timeout_s: float) -> float:
    started = time.monotonic()
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        _track_descendants(server)
        if server.process.poll() is not None:
            raise ServerError(
                f"{server.spec.name} exited with {server.process.returncode} during start-up; "
                f"log tail:\n{_tail(server.log_path)}"
            )
        try:
            if httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200:
                _track_descendants(server)  # the engine cores exist by now
                return time.monotonic() - started
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(1.0)
    raise ServerError(f"{server.spec.name} not healthy after {timeout_s:.0f} s")


def stop(server: RunningServer, grace_s: float = 90.0) -> None:
    """SIGTERM the server, wait, then stop any descendant that outlived it."""
    _track_descendants(server)
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("%s ignored SIGTERM for %.0f s; killing it", server.spec.name, grace_s)
            server.process.kill()
            server.process.wait(30)
    # Children notice their parent is gone on their own (vLLM workers, the multiprocessing
    # resource tracker); give them a moment before signalling any.
    _, leftovers = psutil.wait_procs([p for p in server.tracked.values() if _alive(p)], timeout=10)
    leftovers = [p for p in leftovers if _alive(p)]
    for process in leftovers:
        logger.warning(
            "%s left %s (%s) running; stopping it", server.spec.name, process.pid, _name(process)
        )
        _signal(process, kill=False)
    _, still = psutil.wait_procs(leftovers, timeout=15)
    for process in still:
        _signal(process, kill=True)
    psutil.wait_procs(still, timeout=10)
    survivors = [f"{p.pid} ({_name(p)})" for p in server.tracked.values() if _alive(p)]
    if survivors:
        raise ServerError(f"{server.spec.name}: processes survived stopping: {survivors}")
    logger.info("%s stopped (exit %s)", server.spec.name, server.process.returncode)


def _track_descendants(server: RunningServer) -> None:
    # Remembered as psutil.Process objects: they check the start time, so a reused pid is
    # never mistaken for ours.
    try:
        for child in psutil.Process(server.process.pid).children(recursive=True):
            server.tracked.setdefault(child.pid, child)
    except psutil.NoSuchProcess:
        pass


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _signal(process: psutil.Process, kill: bool) -> None:
    try:
        process.kill() if kill else process.terminate()
    except psutil.NoSuchProcess:
        pass


def _name(process: psutil.Process) -> str:
    try:
        return str(process.name())
    except psutil.Error:
        return "?"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
