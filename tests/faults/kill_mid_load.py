"""A server killed mid-load (`kill -9`) and a fresh one started on the same usage ledger.

What the clients were told before the kill, and what the restarted server reports, are kept
for tests/faults/test_usage_after_kill.py; the restarted server then serves the package's
fault tests (test_faults.py), which end its life: one server start fewer for the tiers.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess

KEYS = '[[key]]\nname = "ops"\nkey = "sk-ops"\nadmin = true\n\n'
KEYS += '[[key]]\nname = "alpha"\nkey = "sk-alpha"\n\n[[key]]\nname = "beta"\nkey = "sk-beta"\n'
KEYS += '\n[[key]]\nname = "gamma"\nkey = "sk-gamma"\nrequests_per_minute = 2\n'
# The fault tests' own key on the restarted server (their requests are no load's).
FAULTS_KEY = "sk-faults"
KEYS += f'\n[[key]]\nname = "faults"\nkey = "{FAULTS_KEY}"\n'
CLIENTS = {"alpha": 4, "beta": 4}
LOAD_SECONDS = 6.0
# The restarted server is the fault tests' (test_faults.py): two engines, so that one can die
# while the other serves, and a short grace for SIGTERM's drain.
GRACE_SECONDS = 4
FAULT_ARGS = ["--engine-layout", "two", "--shutdown-grace-seconds", str(GRACE_SECONDS)]


@dataclass
class AfterAKill:
    limited: list[httpx.Response]  # three requests of the 2-a-minute key, before the load
    told: dict[str, dict[str, int]]  # request id -> the usage its client was told
    whose: dict[str, str]  # request id -> its key's name
    usage: dict[str, Any]  # GET /v1/usage on the restarted server
    # The ledger's rows when the restarted server was ready (the fault tests add theirs):
    # (request id, key name, prompt tokens, completion tokens).
    rows: list[tuple[str, str, int, int]]
    restarted: ServerProcess


def start(tmp: Path, log: str, extra: list[str]) -> ServerProcess:
    args = [
        "--api-key-file", str(tmp / "keys.toml"),
        "--usage-ledger-path", str(tmp / "usage.sqlite3"),
        "--routing-exploration", "0",
        *extra,
    ]  # fmt: skip
    server = ServerProcess(args, tmp / log)
    server.wait_ready()
    return server


def kill_mid_load(tmp: Path) -> AfterAKill:
    """Serve the clients on a server as users start it, SIGKILL it mid-load, start another."""
    (tmp / "keys.toml").write_text(KEYS)
    server = start(tmp, "first.log", [])
    try:
        limited = ask_a_limited_key(server)
        told, whose = load_then_kill(server)
    finally:
        server.kill()
    restarted = start(tmp, "second.log", FAULT_ARGS)
    try:
        usage = httpx.get(
            f"{restarted.base_url}/v1/usage",
            params={"start_time": int(time.time()) - 600, "bucket_width": "1h", "limit": 2},
            headers={"Authorization": "Bearer sk-ops"},
            timeout=30,
        ).json()
        with sqlite3.connect(tmp / "usage.sqlite3") as db:
            rows = db.execute(
                "SELECT request_id, key_name, prompt_tokens, completion_tokens FROM requests"
            ).fetchall()
    except BaseException:
        restarted.kill()
        raise
    return AfterAKill(limited, told, whose, usage, rows, restarted)


def ask_a_limited_key(server: ServerProcess) -> list[httpx.Response]:
    """Three requests of a key allowed 2 a minute, in front of the real engine."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": "Bearer sk-gamma"}, timeout=60
    ) as http:
        return [http.post("/v1/chat/completions", json=body) for _ in range(3)]


def load_then_kill(server: ServerProcess) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """Each key's clients ask in turn, streamed and not, until the server is killed under
    them; what completed for a client, with the usage it was told."""
    seen: dict[str, dict[str, int]] = {}
    owners: dict[str, str] = {}
    stop = threading.Event()
    lock = threading.Lock()

    def client(name: str, index: int) -> None:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer sk-{name}"}, timeout=60
        ) as http:
            turn = 0
            while not stop.is_set():
                turn += 1
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": f"Count to {index + turn}."}],
                    "max_tokens": 12 + (index + turn) % 9,
                    "stream": turn % 2 == 0,
                    "stream_options": {"include_usage": True},
                }
                if not body["stream"]:
                    del body["stream_options"]
                try:
                    done = answer(http, body)
                except httpx.HTTPError:
                    return  # the server is gone
                if done is not None:
                    with lock:
                        seen[done[0]], owners[done[0]] = done[1], name

    threads = [
        threading.Thread(target=client, args=(name, i), daemon=True)
        for name, count in CLIENTS.items()
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    time.sleep(LOAD_SECONDS)
    server.kill()  # SIGKILL to the server and its engine, mid-load
    stop.set()
    for thread in threads:
        thread.join(30)
    with lock:
        return dict(seen), dict(owners)


def answer(http: httpx.Client, body: dict[str, object]) -> tuple[str, dict[str, int]] | None:
    """The request's id and usage once it completed, as its client saw them; None otherwise."""
    if not body.get("stream"):
        response = http.post("/v1/chat/completions", json=body)
        if response.status_code != 200:
            return None
        found = response.json()
        return found["id"], found["usage"]
    chunks: list[dict[str, object]] = []
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            return None
        finished = False
        for line in response.iter_lines():
            if line == "data: [DONE]":
                finished = True
            elif line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    if not finished or not chunks or not chunks[-1].get("usage"):
        return None
    return str(chunks[-1]["id"]), chunks[-1]["usage"]  # type: ignore[return-value]
