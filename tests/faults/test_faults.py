"""Engine death and SIGTERM (both end the server's useful life), on the package's server:
the one restarted after tests/faults/kill_mid_load.py's `kill -9`, two engines, its own key.

Runs after tests/engine, whose package-scoped server has stopped by then: two servers at
once do not fit these machines' memory.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass, field

import httpx
import psutil

from tests.engine.prompts import JSON_CONTINUATION, MODEL
from tests.engine.server import ServerProcess
from tests.faults.kill_mid_load import FAULTS_KEY, GRACE_SECONDS
from tests.openai_schema import ERROR, violations

AUTH = {"Authorization": f"Bearer {FAULTS_KEY}"}
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"


@dataclass
class StreamWatcher:
    """Reads one SSE stream on a thread, so the test can act while it runs."""

    server: ServerProcess
    body: dict[str, object]
    route: str
    events: list[str] = field(default_factory=list)
    error: BaseException | None = None
    first_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        url = f"{self.server.base_url}{COMPLETIONS}"
        try:
            with httpx.stream(
                "POST",
                url,
                json={**self.body, "stream": True},
                headers={**AUTH, "X-Speculative": self.route},
                timeout=120,
            ) as response:
                for line in response.iter_lines():
                    if line and not line.startswith(":"):  # ": ping" is no event
                        self.events.append(line.removeprefix("data: "))
                        self.first_event.set()
        except httpx.HTTPError as exc:  # a cut stream
            self.error = exc
        finally:
            self.first_event.set()

    def join(self, seconds: float) -> None:
        assert self.thread is not None
        self.thread.join(seconds)
        assert not self.thread.is_alive(), f"stream still open after {seconds} s"


def long_body(max_tokens: int) -> dict[str, object]:
    return {"model": MODEL, "prompt": JSON_CONTINUATION, "max_tokens": max_tokens, "temperature": 0}


def engine_cores(server: ServerProcess) -> list[psutil.Process]:
    """vLLM's engine-core processes, oldest (the speculative engine, started first) first."""
    cores = [p for p in server.descendants() if "EngineCore" in _title(p)]
    return sorted(cores, key=lambda p: p.create_time())


def _title(process: psutil.Process) -> str:
    try:
        return process.name() + " " + " ".join(process.cmdline())
    except psutil.Error:
        return ""


def wait_for(condition: object, seconds: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if condition():  # type: ignore[operator]
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {seconds} s")


def test_a_dead_plain_engine_is_reported_and_routed_around(server: ServerProcess) -> None:
    cores = engine_cores(server)
    assert len(cores) == 2, [_title(p) for p in server.descendants()]
    plain_core = cores[1]
    stream = StreamWatcher(server, long_body(2000), "off")
    assert stream.first_event.wait(120) and stream.events, stream.error
    killed_at = time.monotonic()
    plain_core.kill()

    # The request in flight ends with an error event and [DONE]; it does not hang.
    stream.join(30)
    print(f"\nengine killed: the open stream ended {time.monotonic() - killed_at:.1f} s later")
    assert stream.events[-1] == "[DONE]"
    assert "error" in json.loads(stream.events[-2])

    # /health says so within seconds, naming the engine.
    def unhealthy() -> bool:
        return httpx.get(f"{server.base_url}/health", timeout=10).status_code == 503

    print(f"/health 503 after {wait_for(unhealthy, 15, '/health 503'):.1f} s more")
    health = httpx.get(f"{server.base_url}/health", timeout=10).json()
    assert health["engines"]["speculative"] == "ok"
    assert "plain" in health["engines"]["plain"]

    # A client that pinned the dead engine gets a clean 503 ...
    pinned = httpx.post(
        f"{server.base_url}{COMPLETIONS}",
        json=long_body(4),
        headers={**AUTH, "X-Speculative": "off"},
        timeout=60,
    )
    assert pinned.status_code == 503 and violations(pinned.json(), ERROR) == []
    # ... auto traffic falls back to the speculative engine, whose own traffic goes on.
    poem = {"model": MODEL, "messages": [{"role": "user", "content": "A poem"}], "max_tokens": 4}
    auto = httpx.post(f"{server.base_url}{CHAT}", json=poem, headers=AUTH, timeout=60)
    assert auto.status_code == 200, auto.text
    assert auto.headers["x-specgate-reason"] == "fallback: the plain engine is down"
    forced = httpx.post(
        f"{server.base_url}{CHAT}", json=poem, headers={**AUTH, "X-Speculative": "on"}, timeout=60
    )
    assert forced.status_code == 200


def test_sigterm_drains_streams_then_stops_everything(server: ServerProcess) -> None:
    short = StreamWatcher(server, long_body(24), "on")
    endless = StreamWatcher(server, long_body(4000), "on")
    assert short.first_event.wait(60) and endless.first_event.wait(60)
    children = server.descendants()
    signalled_at = time.monotonic()
    server.process.send_signal(signal.SIGTERM)

    def refuses_connections() -> bool:
        try:
            httpx.get(f"{server.base_url}/health", timeout=2)
        except httpx.TransportError:
            return True
        return False

    wait_for(refuses_connections, 5, "new connections refused after SIGTERM")
    # The short stream finishes inside the grace period ...
    short.join(GRACE_SECONDS + 10)
    assert short.events[-1] == "[DONE]", short.events[-3:]
    assert json.loads(short.events[-2])["choices"][0]["finish_reason"] == "length"
    # ... the endless one is cut at its end, with an error event and [DONE] (as when an
    # engine dies), and the process exits with no engine left.
    endless.join(GRACE_SECONDS + 30)
    assert endless.events[-1] == "[DONE]", endless.events[-3:]
    assert json.loads(endless.events[-2])["error"]["code"] == "server_shutting_down"
    server.process.wait(60)
    print(f"\nSIGTERM: exited {time.monotonic() - signalled_at:.1f} s later")
    assert server.process.returncode in (0, -signal.SIGTERM)
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [_title(p) for p in alive]
