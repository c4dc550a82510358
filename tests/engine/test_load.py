"""Load, admission and disconnects on the real engines: every request gets an answer, and
nothing is left running afterwards."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from tests.engine.conftest import MAX_QUEUED, MAX_RUNNING
from tests.engine.prompts import CODE, MODEL
from tests.engine.server import ServerProcess

CHAT = "/v1/chat/completions"
ROUTES = ("on", "off")
# The limits are per engine; both engines together admit this many at once.
ADMITTED = 2 * (MAX_RUNNING + MAX_QUEUED)


@dataclass
class Outcome:
    status: int
    seconds: float
    completed: bool = False
    retry_after: str | None = None


def body(max_tokens: int) -> dict[str, object]:
    return {"model": MODEL, "messages": CODE, "max_tokens": max_tokens, "temperature": 0}


async def one_stream(client: httpx.AsyncClient, route: str) -> Outcome:
    started = time.monotonic()
    request = {**body(64), "stream": True}
    async with client.stream("POST", CHAT, json=request, headers={"X-Speculative": route}) as r:
        if r.status_code != 200:
            await r.aread()
            return Outcome(
                r.status_code, time.monotonic() - started, retry_after=r.headers.get("retry-after")
            )
        lines = [line async for line in r.aiter_lines() if line]
    finished = any('"finish_reason":"length"' in line for line in lines)
    return Outcome(200, time.monotonic() - started, finished and lines[-1] == "data: [DONE]")


def wait_until_idle(server: ServerProcess, limit: float = 30) -> float:
    """Seconds until both engines hold no request and nothing is queued."""
    started = time.monotonic()
    gauges = ("specgate_engine_unfinished_requests", "specgate_queued_requests")
    while time.monotonic() - started < limit:
        if all(server.metric(g, route=e) == 0 for g in gauges for e in ("speculative", "plain")):
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"engines still busy after {limit} s")


async def hold_stream(client: httpx.AsyncClient, route: str, running: asyncio.Event) -> None:
    """A long stream that holds its slot until the test cancels it; `running` is set at its
    first token."""
    request = {**body(2048), "stream": True, "ignore_eos": True}
    async with client.stream("POST", CHAT, json=request, headers={"X-Speculative": route}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line:
                running.set()


async def until_metric(server: ServerProcess, gauge: str, value: float) -> None:
    """Wait (up to 5 minutes) until the gauge reads `value` on both routes."""
    for _ in range(3000):
        readings = [
            await asyncio.to_thread(server.metric, gauge, route=e) for e in ("speculative", "plain")
        ]
        if readings == [value, value]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{gauge} never read {value} on both routes")


def test_load_far_past_the_limits(server: ServerProcess) -> None:
    """Every running slot held by a long stream, every queue place taken, then four times as
    many requests again: each is refused at once with 429, while no slot frees, and the queued
    requests are served in full once the long streams leave."""
    excess = 4 * ADMITTED

    async def run() -> tuple[list[Outcome], list[Outcome], bool]:
        limits = httpx.Limits(max_connections=ADMITTED + excess)
        async with httpx.AsyncClient(
            base_url=server.base_url, timeout=300, limits=limits
        ) as client:
            started = [asyncio.Event() for _ in range(2 * MAX_RUNNING)]
            holders = [
                asyncio.create_task(hold_stream(client, ROUTES[i % 2], event))
                for i, event in enumerate(started)
            ]
            await asyncio.gather(*(event.wait() for event in started))
            queued = [
                asyncio.create_task(one_stream(client, ROUTES[i % 2]))
                for i in range(2 * MAX_QUEUED)
            ]
            await until_metric(server, "specgate_queued_requests", MAX_QUEUED)
            refused = [
                asyncio.create_task(one_stream(client, ROUTES[i % 2])) for i in range(excess)
            ]
            # Ordered by events, not timed: the refusals must all be in before any slot frees
            # (a long stream ends after 2048 tokens), however slow the machine.
            pending: set[asyncio.Task[object]] = {*refused, *holders}
            while any(not t.done() for t in refused) and not any(t.done() for t in holders):
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            slots_held = not any(t.done() for t in holders)
            for holder in holders:
                holder.cancel()  # leaving mid-stream frees the slot for a queued request
            await asyncio.gather(*holders, return_exceptions=True)
            return await asyncio.gather(*refused), await asyncio.gather(*queued), slots_held

    refused, queued, slots_held = asyncio.run(run())
    print(
        f"\nload: {ADMITTED} admitted, {len(refused)} more sent, "
        f"slowest refusal {max(o.seconds for o in refused):.3f} s, "
        f"slowest queued stream {max(o.seconds for o in queued):.1f} s"
    )
    assert slots_held, "a long stream ended before every refusal was answered"
    assert all(o.status == 429 and o.retry_after == "1" for o in refused), [
        (o.status, o.retry_after) for o in refused
    ]
    assert all(o.status == 200 and o.completed for o in queued), [o.status for o in queued]
    print(f"idle again after {wait_until_idle(server):.2f} s")
    assert httpx.get(f"{server.base_url}/health", timeout=30).status_code == 200


def test_clients_that_leave_free_their_engine_work(server: ServerProcess) -> None:
    async def leave_mid_stream(client: httpx.AsyncClient, route: str) -> None:
        request = {**body(400), "stream": True}
        async with client.stream("POST", CHAT, json=request, headers={"X-Speculative": route}) as r:
            assert r.status_code == 200
            seen = 0
            async for line in r.aiter_lines():
                seen += bool(line)
                if seen == 3:
                    break  # leaving the block closes the connection mid-stream

    async def leave_while_waiting(client: httpx.AsyncClient, route: str) -> None:
        try:
            await client.post(CHAT, json=body(400), headers={"X-Speculative": route}, timeout=1.5)
        except httpx.TimeoutException:
            pass  # the client gave up and closed its connection
        else:
            raise AssertionError("400 tokens cannot have come back in 1.5 s")

    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            for _ in range(3):  # waves that fit the admission limits
                await asyncio.gather(
                    leave_mid_stream(client, "on"),
                    leave_mid_stream(client, "off"),
                    leave_while_waiting(client, "on"),
                    leave_while_waiting(client, "off"),
                )

    asyncio.run(run())
    recovered = wait_until_idle(server)
    print(f"\ndisconnects: 12 clients left part-way; engines idle {recovered:.2f} s later")
    aborted = sum(
        server.metric(
            "specgate_requests_total",
            route=e,
            workload_class="code",
            endpoint="chat",
            outcome="aborted",
        )
        for e in ("speculative", "plain")
    )
    assert aborted >= 12


def test_prompts_are_not_logged_by_default(server: ServerProcess) -> None:
    marker = "zebra-credential-7731"
    message = {"role": "user", "content": f"Repeat this: {marker}"}
    request = {**body(8), "messages": [message]}
    assert httpx.post(f"{server.base_url}{CHAT}", json=request, timeout=300).status_code == 200
    assert marker not in server.log_path.read_text(errors="replace")
