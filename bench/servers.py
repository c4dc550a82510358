"""The one launcher of server processes, for benchmarks and tests alike: start specgate
(`python -m app`), vLLM's OpenAI server or any `python -m` server on a port, with its output
in a log file; wait for its /health; stop it with everything it started.

Each server runs in a process group of its own (a new session), so Ctrl-C in the terminal
reaches only the caller, which then stops the server in order. vLLM's engine cores run in
child processes that can outlive a parent stopped by SIGTERM alone, so every descendant seen
while the server ran, and every process left in its group, is stopped too, and stopping fails
if one survives SIGKILL. Only processes this launcher started are ever signalled; any still
running when the interpreter exits are killed then.

Memory is tight on the benchmark machine (two fp32 engines need most of NUMA node 0), so the
benchmarks never run two engine servers at once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psutil

from app.drafters import NGRAM
from app.embedded_model import MODEL_NAME
from app.engine.vllm.cpu_cores import NUMBA_DEFAULTS
from app.engine.vllm.cpu_runtime import recommended_preload

logger = logging.getLogger("bench.servers")

REPO = Path(__file__).resolve().parents[1]
# The embedded default model, where a specgate start leaves it converted: vLLM's server
# arms serve the same folder.
MODEL_DIR = Path.home() / ".cache" / "specgate" / "models" / MODEL_NAME
START_TIMEOUT_S = 900.0  # a cold start converts the model and compiles both engines
STOP_GRACE_S = 90.0  # SIGTERM to exit; then SIGKILL
LEFTOVER_GRACE_S = 10.0  # for children to notice their parent is gone, before signalling them


class ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class ServerSpec:
    name: str  # the log file's name, and the server's in messages
    argv: list[str]  # without --port, which the launcher adds
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment


def module_spec(
    module: str,
    args: list[str],
    cwd: Path = REPO,
    name: str | None = None,
    env: dict[str, str] | None = None,
) -> ServerSpec:
    """`python -m module *args`."""
    default = "specgate" if module == "app" else module.rsplit(".", 1)[-1]
    return ServerSpec(name or default, [sys.executable, "-m", module, *args], cwd, dict(env or {}))


def specgate_spec(repo: Path, extra_args: list[str], name: str = "specgate") -> ServerSpec:
    return module_spec("app", extra_args, repo, name)


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
    args = [
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
    # As vLLM's CPU image runs it: tcmalloc and Intel's OpenMP preloaded, found where
    # specgate's engines find them (an env with LD_PRELOAD, even empty, keeps its own).
    preload = recommended_preload(True)
    env = {**({"LD_PRELOAD": preload} if preload else {}), **(env or {})}
    if speculative:
        config = NGRAM if speculative is True else speculative
        args += ["--speculative-config", json.dumps(config)]
        # The numba setting specgate gives its engines (app/engine/vllm/cpu_cores.py): without it
        # vLLM's own ngram proposer slows every later step, so the baseline gets it too.
        env = {**NUMBA_DEFAULTS, **env}
    name = name or ("vllm-spec" if speculative else "vllm-plain")
    return module_spec("vllm.entrypoints.openai.api_server", args + extra_args, cwd, name, env)


def traced(spec: ServerSpec, log_dir: Path) -> ServerSpec:
    """A specgate server that writes every engine step's shape, drafts and time
    (app/engine/vllm/core/draft_length_scheduler.py) to `log_dir`/<name>.steps.jsonl."""
    trace = log_dir / f"{spec.name}.steps.jsonl"
    return replace(spec, env={**spec.env, "SPECGATE_STEP_TRACE": str(trace)})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_RUNNING: dict[int, ServerProcess] = {}


class ServerProcess:
    """One server process, started on construction (in its own process group) with its
    output in `log_path`; `wait_ready()` waits for its /health, `stop()` ends it."""

    def __init__(self, spec: ServerSpec, log_path: Path, port: int | None = None) -> None:
        self.spec = spec
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.startup_s = 0.0
        # Every descendant seen, as psutil.Process objects: they check the start time, so a
        # reused pid is never mistaken for ours.
        self.tracked: dict[int, psutil.Process] = {}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [*spec.argv, "--port", str(self.port)]
        logger.info("starting %s: %s (log: %s)", spec.name, " ".join(argv), log_path)
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=spec.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **spec.env},
                start_new_session=True,
            )
        _RUNNING[self.process.pid] = self

    @property
    def name(self) -> str:
        return self.spec.name

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Seconds from start to a 200 from /health; on exit or timeout, ServerError with the
        log's tail (a server that timed out is killed first)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            self._track()
            if self.process.poll() is not None:
                raise ServerError(
                    f"{self.name} exited with {self.process.returncode} during start-up; "
                    f"log tail:\n{self.log_tail()}"
                )
            try:
                if httpx.get(f"{self.base_url}/health", timeout=5).status_code == 200:
                    self._track()  # the engine cores exist by now
                    self.startup_s = time.monotonic() - started
                    logger.info("%s healthy after %.1f s", self.name, self.startup_s)
                    return self.startup_s
            except httpx.HTTPError:
                pass  # not listening yet
            time.sleep(1.0)
        self.kill()
        raise ServerError(f"{self.name} not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")

    def descendants(self) -> list[psutil.Process]:
        """The server's processes below it, alive now."""
        try:
            return list(psutil.Process(self.process.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            return []

    def stop(
        self, sig: signal.Signals = signal.SIGTERM, grace_s: float = STOP_GRACE_S
    ) -> list[psutil.Process]:
        """Send `sig` and wait for the server to exit (SIGKILL after `grace_s`), then stop
        whatever it left running. Returns those leftovers (stopped by now: a clean stop
        leaves none); ServerError if one survives SIGKILL."""
        if sig == signal.SIGKILL:
            self.kill()
            return []
        self._track()
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                logger.warning("%s ignored %s for %.0f s; killing it", self.name, sig.name, grace_s)
                self.process.kill()
                self.process.wait(30)
        _RUNNING.pop(self.process.pid, None)
        # Children notice their parent is gone on their own (vLLM workers, the multiprocessing
        # resource tracker); give them a moment before signalling any.
        _, leftovers = psutil.wait_procs(self._others(), timeout=LEFTOVER_GRACE_S)
        leftovers = [p for p in leftovers if _alive(p)]
        for process in leftovers:
            logger.warning(
                "%s left %s (%s) running; stopping it", self.name, process.pid, _name(process)
            )
            _signal(process, kill=False)
        _, still = psutil.wait_procs(leftovers, timeout=15)
        for process in still:
            _signal(process, kill=True)
        psutil.wait_procs(still, timeout=10)
        survivors = [f"{p.pid} ({_name(p)})" for p in self._others()]
        if survivors:
            raise ServerError(f"{self.name}: processes survived stopping: {survivors}")
        logger.info("%s stopped (exit %s)", self.name, self.process.returncode)
        return leftovers

    def kill(self) -> None:
        """SIGKILL the server and every process under it at once, as a crashed node would go."""
        self._track()
        processes = [*self.tracked.values()]
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # the group: the server is its leader
        for process in processes:
            _signal(process, kill=True)
        self.process.wait()
        _RUNNING.pop(self.process.pid, None)
        psutil.wait_procs(processes, timeout=30)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _track(self) -> None:
        for child in self.descendants():
            self.tracked.setdefault(child.pid, child)

    def _others(self) -> list[psutil.Process]:
        """Every process of the server's but the server itself still alive: those tracked,
        and those left in its process group (started after the last look)."""
        found = {pid: p for pid, p in self.tracked.items() if _alive(p)}
        for process in psutil.process_iter():
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                if process.pid not in found and os.getpgid(process.pid) == self.process.pid:
                    if _alive(process):
                        found[process.pid] = process
        return list(found.values())


@contextmanager
def serve(
    spec: ServerSpec, port: int, log_dir: Path, startup_timeout_s: float
) -> Iterator[ServerProcess]:
    """Run the server for the duration of the block, healthy on entry; it is stopped however
    the block ends."""
    server = ServerProcess(spec, log_dir / f"{spec.name}.log", port)
    try:
        server.wait_ready(startup_timeout_s)
        yield server
    finally:
        server.stop()


@contextmanager
def serve_together(
    specs: list[ServerSpec], log_dir: Path, startup_timeout_s: float
) -> Iterator[list[ServerProcess]]:
    """`serve` for several servers started at once: a start is mostly one interpreter at a
    time importing torch and vLLM, so two overlap on two cores. Only where all fit in memory
    at once and an idle one does not disturb what the other measures."""
    servers: list[ServerProcess] = []
    try:
        for spec in specs:  # each kept as soon as it runs, so a failed start stops the others
            servers.append(ServerProcess(spec, log_dir / f"{spec.name}.log"))
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.wait_ready(startup_timeout_s), servers))
        yield servers
    finally:
        for server in servers:
            server.stop()


@atexit.register
def _kill_left_running() -> None:
    # A caller that never stopped its server (a hard error, a second Ctrl-C): its own process
    # group would keep it running after the caller is gone.
    for server in list(_RUNNING.values()):
        if server.process.poll() is None:
            logger.warning("%s still running at exit; killing it", server.name)
            server.kill()


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


def stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler that raises, so that the `finally` blocks stop the servers."""
    raise KeyboardInterrupt(f"signal {signum}")
