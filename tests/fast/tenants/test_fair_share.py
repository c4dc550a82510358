"""A freed slot goes to the waiting tenant served least by weight (VTC), within a tenant in
arrival order; idle time is not banked as credit."""

from __future__ import annotations

import asyncio

import pytest

from app.admission import Admission
from app.errors import OverloadedError
from app.tenants.fair_share import FairShare

COST = 10.0  # what each admitted request is charged here


async def served_order(
    share: FairShare, arrivals: list[str], weights: dict[str, float] | None = None
) -> list[str]:
    """Tenants in the order one slot serves their queued requests, each charged COST when it
    gets the slot (as the dispatcher charges a prompt)."""
    weights = weights or {}
    admission = Admission("plain", max_running=1, max_queued=64, queue_timeout=10, fair_share=share)
    await admission.enter("holder")  # the slot is taken: everyone below waits
    order: list[str] = []

    async def one(tenant: str) -> None:
        await admission.enter(tenant)
        order.append(tenant)
        share.charge(tenant, COST, weights.get(tenant, 1.0))

    tasks = []
    for tenant in arrivals:
        tasks.append(asyncio.create_task(one(tenant)))
        await asyncio.sleep(0)  # each in the queue before the next arrives
    for _ in arrivals:
        admission.leave()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return order


async def test_a_flood_does_not_push_a_light_tenant_behind_it() -> None:
    order = await served_order(FairShare(), ["a"] * 6 + ["b", "b"])
    # b arrived last, behind six of a's, and is served second and fourth.
    assert order == ["a", "b", "a", "b", "a", "a", "a", "a"]


async def test_weights_share_the_slot_in_their_ratio() -> None:
    order = await served_order(FairShare(), ["a"] * 6 + ["b"] * 6, {"b": 2.0})
    assert order[:9] == ["a", "b", "b", "a", "b", "b", "a", "b", "b"]


async def test_one_tenant_is_served_first_come_first_served() -> None:
    share = FairShare()
    admission = Admission("plain", max_running=1, max_queued=8, queue_timeout=10, fair_share=share)
    await admission.enter("a")
    order: list[int] = []

    async def one(i: int) -> None:
        await admission.enter("a")
        order.append(i)

    tasks = [asyncio.create_task(one(i)) for i in range(5)]
    await asyncio.sleep(0)
    for _ in range(5):
        share.charge("a", COST, 1.0)
        admission.leave()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_idle_time_is_not_banked() -> None:
    share = FairShare()
    share.charge("a", 1000.0, 1.0)  # a was served alone for a long while; b sat idle at 0
    order = await served_order(share, ["a", "a", "a", "b", "b", "b"])
    # Waiting behind a, b starts from a's count, not from 0: they alternate.
    assert order == ["a", "b", "a", "b", "a", "b"]


async def test_a_full_queue_refuses_the_flood_s_newest_not_the_light_tenant() -> None:
    share = FairShare()
    admission = Admission("plain", max_running=1, max_queued=3, queue_timeout=10, fair_share=share)
    await admission.enter("holder")
    flood = [asyncio.create_task(admission.enter("a")) for _ in range(3)]
    await asyncio.sleep(0)
    assert admission.queued() == 3
    light = asyncio.create_task(admission.enter("b"))  # the queue is full: a's newest makes room
    with pytest.raises(OverloadedError):
        await flood[2]
    assert admission.queued() == 3 and not light.done()
    with pytest.raises(OverloadedError):  # a flood's own newcomer finds no room
        await admission.enter("a")
    admission.leave()
    await asyncio.sleep(0)
    assert light.done() or flood[0].done()  # a slot went to a waiter, none was lost
    assert admission.running == 1
    for task in (*flood[:2], light):
        if not task.done():
            admission.leave()
            await asyncio.sleep(0)
    assert all(t.done() for t in (*flood[:2], light)) and light.exception() is None
