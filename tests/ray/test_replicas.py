"""specgate on a real local Ray cluster: two fake-engine replicas behind the gateway as
Serve's ingress, specgate's request router between them, the real `openai` SDK in front."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import ray
from openai import OpenAI

from app.serve_ray.replica import EngineRecipe
from app.settings import Settings
from tests.ray.conftest import Cluster

# The fake engine's pace: a 300-token answer takes about 3 s.
SECONDS_PER_TOKEN = 0.01
DRAFT = {"X-Speculative": "on"}
PLAIN = {"X-Speculative": "off"}


@pytest.fixture(scope="module")
def site(cluster: Cluster) -> Iterator[Cluster]:
    cluster.deploy(
        Settings(ray_replicas=2, routing_exploration=0),
        EngineRecipe(
            fake="app.engine.fakes.scripted:FakeEngine",
            fake_args={
                "route": "speculative",
                "seconds_per_token": SECONDS_PER_TOKEN,
                "per_request_draft_length": True,
            },
        ),
    )
    cluster.wait_for_replicas(2)
    try:
        yield cluster
    finally:
        cluster.undeploy()


def client(site: Cluster) -> OpenAI:
    return OpenAI(base_url=f"{site.base_url}/v1", api_key="-", max_retries=0, timeout=120)


def model(site: Cluster) -> str:
    return client(site).models.list().data[0].id


def test_the_api_streams_through_serve(site: Cluster) -> None:
    sdk, name = client(site), model(site)
    raw = sdk.chat.completions.with_raw_response.create(
        model=name, messages=[{"role": "user", "content": "one two three"}], max_tokens=6
    )
    assert raw.headers["x-specgate-route"] in ("speculative", "plain")
    answer = raw.parse()
    assert answer.choices[0].message.content == " one two three one two three"
    assert answer.usage is not None and answer.usage.completion_tokens == 6
    stream = sdk.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "a b c"}], max_tokens=5, stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta]
    assert "".join(p for p in pieces if p) == " a b c a b"
    completion = sdk.completions.create(model=name, prompt="x y", max_tokens=3)
    assert completion.choices[0].text == " x y x"
    response = sdk.responses.create(model=name, input="red green", max_output_tokens=4)
    assert response.output_text == " red green red green"
    health = site.health()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    metrics = httpx.get(f"{site.base_url}/metrics", timeout=30).text
    assert 'specgate_requests_total{endpoint="chat",outcome="ok"' in metrics
    # Every replica's report, not only the one a handle call reaches.
    running = [
        line for line in metrics.splitlines() if line.startswith("specgate_replica_running{")
    ]
    assert len(running) == 2, running


def _long_requests(site: Cluster, count: int, tokens: int) -> list[int]:
    """`count` requests at once that never draft: no drafter history holds them together,
    so only the batches place them."""
    sdk, name = client(site), model(site)

    def one(i: int) -> int:
        answer = sdk.completions.create(
            model=name, prompt=f"w{i} x{i}", max_tokens=tokens, extra_headers=PLAIN
        )
        return answer.usage.completion_tokens if answer.usage else 0

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def _running_during(site: Cluster, work: object) -> dict[str, int]:
    """The most requests each replica reported running while `work` ran."""
    most: dict[str, int] = {}
    thread = threading.Thread(target=work)  # type: ignore[arg-type]
    thread.start()
    while thread.is_alive():
        for name, stats in site.stats().items():
            most[name] = max(most.get(name, 0), int(stats["running"]))
        time.sleep(0.2)
    thread.join()
    return most


def test_requests_at_once_spread_over_both_replicas(site: Cluster) -> None:
    most = _running_during(site, lambda: _long_requests(site, 4, 200))
    assert len(most) == 2
    assert all(running >= 1 for running in most.values()), most


def test_a_tenants_drafting_requests_stay_with_its_history_and_tenants_spread(
    site: Cluster,
) -> None:
    sdk, name = client(site), model(site)
    for salt in ("alpha",) * 5 + tuple(f"tenant-{i}" for i in range(12)):
        sdk.completions.create(
            model=name,
            prompt="def f(x):\n    return x\n",
            max_tokens=4,
            extra_headers=DRAFT,
            extra_body={"cache_salt": salt},
        )
    # The salted tenants' keys (earlier tests drafted under the API key's).
    histories = {
        name: {key for key in stats["histories"] if key.startswith("salt:")}
        for name, stats in site.stats().items()
    }
    assert all(histories.values()), histories  # twelve tenants: both replicas hold some
    # Each tenant's key lives on exactly one replica: none was split.
    keys = [key for held in histories.values() for key in held]
    assert len(keys) == len(set(keys)) == 13, histories


def _sse_events(response: httpx.Response, on_event: object) -> list[str]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line.removeprefix("data: "))
            on_event(len(events))  # type: ignore[operator]
    return events


def test_a_replica_killed_mid_stream_is_survived(site: Cluster) -> None:
    killed: list[str] = []

    def kill_the_busy_replica(seen: int) -> None:
        if seen != 5 or killed:
            return
        for name, stats in site.stats().items():
            if stats["running"]:
                ray.kill(site.replicas()[name], no_restart=False)
                killed.append(name)
                return

    body = {
        "model": model(site),
        "prompt": "k l m",
        "max_tokens": 240,  # the fake engine holds 256 tokens
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{site.base_url}/v1/completions", json=body, timeout=120
    ) as response:
        events = _sse_events(response, kill_the_busy_replica)
    assert killed, "no replica was serving the stream"
    # The stream ends with an error event and [DONE], well before its 240 tokens.
    assert events[-1] == "[DONE]", events[-3:]
    assert "error" in json.loads(events[-2]), events[-3:]
    assert len(events) < 200
    # Later requests are served (by the survivor, or by a request retried off the dead one).
    assert _long_requests(site, 6, 5) == [5] * 6
    # Ray restarts the replica, and it serves again once the gateway's router has heard of
    # it (Serve tells the routers of a new replica a moment after it is running).
    replicas = site.wait_for_replicas(2)
    assert killed[0] not in replicas
    for _ in range(5):
        most = _running_during(site, lambda: _long_requests(site, 4, 200))
        if all(running >= 1 for running in most.values()):
            break
        time.sleep(1.0)
    assert all(running >= 1 for running in most.values()), most
