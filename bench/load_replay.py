"""One arm's replay of the schedule on one server: each request sent at its time (open loop)
or as the last one ends (closed loop), measured (bench/client.py) and recorded where it sat."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from bench.client import Arm, Prompt, Sample, measure, request_body
from bench.load_arms import LoadArm
from bench.load_schedule import Phase, Slot

logger = logging.getLogger("bench.load_phases")


@dataclass
class Record:
    """One measured request and where it sat in the schedule."""

    phase: str
    slot: int
    sample: Sample
    scheduled_s: float | None
    sent_s: float  # when it was actually sent, from the schedule's start
    in_flight_at_send: int  # this arm's requests still open when it was sent
    repeat: int = 0  # which run of the arm (--repeats): its round

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "slot": self.slot,
            "repeat": self.repeat,
            "scheduled_s": self.scheduled_s,
            "sent_s": round(self.sent_s, 4),
            "in_flight_at_send": self.in_flight_at_send,
            "switches": self.sample.switches,
            **asdict(self.sample),
        }


@dataclass
class ArmRun:
    arm: LoadArm
    client: httpx.AsyncClient
    prompts: dict[str, Prompt]
    args: argparse.Namespace
    repeat: int = 0
    started: float = 0.0
    open_requests: int = 0
    records: list[Record] = field(default_factory=list)

    def body(self, prompt: Prompt) -> dict[str, Any]:
        body = request_body(
            prompt, self.args.model_name, self.args.max_tokens, self.args.request_seed
        )
        if self.args.ignore_eos:
            # Every answer exactly max_tokens long: servers and arms whose sampled answers
            # end at different lengths would otherwise compare unequal work.
            body["ignore_eos"] = True
        return body

    @property
    def client_arm(self) -> Arm:
        label = self.arm.name if self.arm.server == "vllm" else f"specgate-{self.arm.name}"
        return Arm(self.arm.name, label, self.arm.header)

    async def send(self, slot: Slot, level: int) -> None:
        prompt = self.prompts[slot.prompt_id]
        in_flight = self.open_requests
        self.open_requests += 1
        sent = time.perf_counter() - self.started
        try:
            sample = await measure(
                self.client, self.client_arm, prompt, self.body(prompt), level, self.repeat
            )
        except Exception as exc:  # a malformed stream must not end the whole schedule
            sample = Sample(self.arm.name, level, self.repeat, prompt.id, prompt.cls)
            sample.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.open_requests -= 1
        record = Record(slot.phase, slot.index, sample, slot.at_s, sent, in_flight, self.repeat)
        self.records.append(record)
        _log_record(record)


async def run_arm(
    base_url: str,
    arm: LoadArm,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
    args: argparse.Namespace,
    repeat: int = 0,
    warmup: int | None = None,
) -> list[Record]:
    """`schedule`'s requests on one server, after `warmup` unrecorded ones (default
    --warmup); the open-loop slots' times count from the first request sent."""
    # No connection limit: a pool cap would queue open-loop requests in the client, unseen.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(args.request_timeout, connect=10.0)
    by_id = {p.id: p for p in prompts}
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        run = ArmRun(arm, client, by_id, args, repeat)
        for prompt in prompts[: args.warmup if warmup is None else warmup]:
            sample = await measure(client, run.client_arm, prompt, run.body(prompt), 1, -1)
            if not sample.ok:
                logger.warning("warm-up %s on %s failed: %s", prompt.id, arm.name, sample.error)
        run.started = time.perf_counter()
        await open_loop(run, [s for s in schedule if s.at_s is not None])
        for phase in phases:
            if not phase.open_loop:
                assert phase.concurrency is not None
                slots = [s for s in schedule if s.phase == phase.name]
                await closed_loop(run, slots, phase.concurrency)
    return sorted(run.records, key=lambda r: r.slot)


async def open_loop(run: ArmRun, slots: Sequence[Slot]) -> None:
    """Send each request at its time, whatever is still open; then wait for all of them."""
    tasks = []
    for slot in slots:
        assert slot.at_s is not None
        delay = run.started + slot.at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(run.send(slot, 0)))
    await asyncio.gather(*tasks)


async def closed_loop(run: ArmRun, slots: Sequence[Slot], concurrency: int) -> None:
    """`concurrency` workers, each sending the next slot as soon as its last one finished."""
    queue = list(reversed(slots))

    async def worker() -> None:
        while queue:
            await run.send(queue.pop(), concurrency)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(slots)))))


def _log_record(record: Record) -> None:
    s = record.sample
    if not s.ok:
        logger.warning(
            "%s r%d slot %d %s %s: %s",
            s.arm,
            record.repeat,
            record.slot,
            record.phase,
            s.prompt_id,
            s.error,
        )
        return
    logger.info(
        "%-11s r%d %-6s slot %2d %-15s in-flight %2d route=%-11s e2e=%.2fs ttft=%.0fms tokens=%s%s",
        s.arm,
        record.repeat,
        record.phase,
        record.slot,
        s.prompt_id,
        record.in_flight_at_send,
        s.route,
        s.e2e_s or 0.0,
        (s.ttft_s or 0.0) * 1000,
        s.completion_tokens,
        f" switches={s.switches}" if s.switches else "",
    )
