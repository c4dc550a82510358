"""The usage ledger under `kill -9` (issue 43): every request a client saw complete before
the kill is in the ledger after a restart, none twice, with the tokens the client was told.

Runs on a server of its own, killed mid-load; the restarted server reads the same ledger.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import httpx

from tests.engine.prompts import MODEL
from tests.engine.server import ServerProcess

KEYS = '[[key]]\nname = "ops"\nkey = "sk-ops"\nadmin = true\n\n'
KEYS += '[[key]]\nname = "alpha"\nkey = "sk-alpha"\n\n[[key]]\nname = "beta"\nkey = "sk-beta"\n'
KEYS += '\n[[key]]\nname = "gamma"\nkey = "sk-gamma"\nrequests_per_minute = 2\n'
CLIENTS = {"alpha": 4, "beta": 4}
LOAD_SECONDS = 6.0


def start(tmp: Path, log: str) -> ServerProcess:
    args = [
        "--api-key-file", str(tmp / "keys.toml"),
        "--usage-ledger-path", str(tmp / "usage.sqlite3"),
        "--routing-exploration", "0",
    ]  # fmt: skip
    server = ServerProcess(args, tmp / log)
    server.wait_ready()
    return server


def test_the_ledger_keeps_every_completed_request_through_a_kill(tmp_path: Path) -> None:
    (tmp_path / "keys.toml").write_text(KEYS)
    server = start(tmp_path, "first.log")
    limited_on_the_real_engine(server)
    seen: dict[str, dict[str, int]] = {}  # request id -> the usage its client was told
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
        told, whose = dict(seen), dict(owners)
    assert len(told) >= 8, f"only {len(told)} requests completed before the kill"

    restarted = start(tmp_path, "second.log")
    try:
        usage = httpx.get(
            f"{restarted.base_url}/v1/usage",
            params={"start_time": int(time.time()) - 600, "bucket_width": "1h", "limit": 2},
            headers={"Authorization": "Bearer sk-ops"},
            timeout=30,
        ).json()
    finally:
        restarted.stop()
    with sqlite3.connect(tmp_path / "usage.sqlite3") as db:
        rows = db.execute(
            "SELECT request_id, key_name, prompt_tokens, completion_tokens FROM requests"
        ).fetchall()
    kept = {rid: (key, prompt, completion) for rid, key, prompt, completion in rows}
    assert len(kept) == len(rows)  # one row a request
    for rid, told_usage in told.items():
        assert rid in kept, f"{rid} completed for its client but is not in the ledger"
        assert kept[rid] == (
            whose[rid],
            told_usage["prompt_tokens"],
            told_usage["completion_tokens"],
        )
    # At most the requests running at the kill completed in the ledger unseen by a client.
    loaded = [rid for rid, (key, _, _) in kept.items() if key in CLIENTS]
    assert len(loaded) - len(told) <= sum(CLIENTS.values())
    assert sum(1 for key, _, _ in kept.values() if key == "gamma") == 2
    results = [r for bucket in usage["data"] for r in bucket["results"]]
    for name in CLIENTS:
        assert sum(r["num_model_requests"] for r in results if r["api_key_id"] == name) == sum(
            1 for key, _, _ in kept.values() if key == name
        )


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


def limited_on_the_real_engine(server: ServerProcess) -> None:
    """A key of 2 requests a minute in front of the real engine: two answers with OpenAI's
    headers, then a 429 with Retry-After (its 429 is in the ledger too, not a request)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": "Bearer sk-gamma"}, timeout=60
    ) as http:
        answers = [http.post("/v1/chat/completions", json=body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["1", "0", "0"]
    refused = answers[2].json()["error"]
    assert refused["code"] == "rate_limit_exceeded" and refused["type"] == "requests"
    assert 1 <= int(answers[2].headers["retry-after"]) <= 60
