"""Replay a seeded, open-loop arrival schedule (quiet, burst, quiet, then a steady closed loop)
against specgate, one fresh server per arm, and compare never / always / auto routing.

    python -m bench.load_phases                         # the default schedule (long)
    python -m bench.load_phases --smoke --out-dir /tmp/lp-smoke   # a quick end-to-end check
    python -m bench.load_phases --dry-run               # print the schedule, start nothing
    python -m bench.load_phases --arms changing-load --steady 0,0 --repeats 3   # issue 30

Open loop: each request of the quiet and burst phases is sent at its scheduled time whether or
not earlier ones have finished, so a slow arm builds up a queue as a real service would. The
steady phase is a closed loop: a fixed number of requests in flight. Every arm replays the
identical schedule of (time, prompt). With --repeats R every arm runs R times, in interleaved
rounds, and bench/repeats.py reports medians and spreads over them. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from app.drafters import NGRAM
from bench import repeats, report
from bench.client import Arm, Prompt, Sample, measure, request_body
from bench.manifest import recorded_run
from bench.prompt_set import load_prompts
from bench.report import ms_cell, num_cell, s_cell
from bench.servers import (
    MODEL_DIR,
    MODEL_NAME,
    REPO,
    ServerError,
    ServerSpec,
    free_port,
    module_spec,
    serve,
    specgate_spec,
    stop_on_sigterm,
    traced,
    vllm_spec,
    whole_machine_env,
)

logger = logging.getLogger("bench.load_phases")

ALL = report.ALL
ORACLE = report.ORACLE
FIXED_ARMS = ("never", "always")


@dataclass(frozen=True)
class LoadArm:
    name: str
    header: str | None  # X-Speculative (None: not sent; vLLM's server ignores it anyway)
    server_args: tuple[str, ...] = ()  # extra flags for this arm's server
    # "vllm": vLLM's own OpenAI server on the same model and engine flags; "ray-fake":
    # specgate on Ray Serve over paced fake replicas (bench/ray_fake_server.py), server_args
    # its own; "envoy-pool": one Envoy in front of two specgate servers over paced fake
    # engines (bench/envoy_pool.py), server_args its own.
    server: str = "specgate"
    # vLLM's --speculative-config (None: no speculation).
    speculative_config: dict[str, Any] | None = None
    # Every core computing, none reserved (VLLM_CPU_OMP_THREADS_BIND), as specgate's one engine.
    whole_machine: bool = False
    # More of the server's environment: (name, value) pairs.
    env: tuple[tuple[str, str], ...] = ()


def _ngram(**more: Any) -> dict[str, Any]:
    return {**NGRAM, **more}


ONE = ("--engine-layout", "one")
DEEP_SUFFIX = {
    "method": "suffix",
    "num_speculative_tokens": 32,
    "suffix_decoding_max_tree_depth": 64,
    "suffix_decoding_max_spec_factor": 2.0,
}
DEEP_SUFFIX_CONFIG = json.dumps(DEEP_SUFFIX)
ARM_TABLE: tuple[LoadArm, ...] = (
    LoadArm("never", "off"),
    LoadArm("always", "on"),
    LoadArm("auto", "auto", ("--routing-mid-stream", "off")),
    # Auto routing that may change engine part-way through a response.
    LoadArm("auto-switch", "auto", ("--routing-mid-stream", "on")),
    # Two engines on split cores, every default (mid-stream moves on).
    LoadArm("auto-two", "auto", ("--engine-layout", "two")),
    # One engine on every core; auto: a draft length per request and per step.
    LoadArm("never-one", "off", ONE),
    LoadArm("always-one", "on", ONE),
    LoadArm("auto-one", "auto", ONE),
    # The default until issue 40: n-gram prompt lookup (K 5, window 2-5).
    LoadArm("auto-one-ngram", "auto", (*ONE, "--speculative-config", json.dumps(NGRAM))),
    LoadArm("never-one-ngram", "off", (*ONE, "--speculative-config", json.dumps(NGRAM))),
    # The same over suffix trees (arctic-inference): the prompt's and earlier answers'.
    LoadArm("auto-one-suffix", "auto", (*ONE, "--speculative-config", '{"method": "suffix"}')),
    # The same engine as a Ray Serve replica behind the gateway as Serve's ingress (its
    # engine computes on every core: the replica reserves no logical CPU).
    LoadArm("auto-one-ray", "auto", (*ONE, "--ray-replicas", "1", "--ray-replica-cpus", "0")),
    # Deeper trees that draft further from long matches (up to 32 tokens), the rule cutting
    # each draft to what pays: the simulator's specgate arm over suffix trees.
    LoadArm("auto-one-suffix-deep", "auto", (*ONE, "--speculative-config", DEEP_SUFFIX_CONFIG)),
    # Two paced fake replicas on Ray Serve behind specgate's gateway, routed by specgate's
    # router, Ray's power of two choices, or Ray's prefix-cache affinity (issue 32's bench).
    *(
        LoadArm(f"ray2-{router}", "auto", ("--router", router), server="ray-fake")
        for router in ("specgate", "power-of-two", "prefix-affinity")
    ),
    # Envoy in front of two specgate servers over paced fake engines, balanced by specgate's
    # picker (ext_proc, the endpoint-picker protocol) or Envoy's own least-request (issue 34).
    *(
        LoadArm(f"envoy2-{balancing}", "auto", ("--balancing", balancing), server="envoy-pool")
        for balancing in ("picker", "least-request")
    ),
    # Never drafting with vLLM's own RMSNorm on CPUs (app/engine/vllm/worker/cpu_kernels.py),
    # for the kernels' regression check against never-one.
    LoadArm("never-one-reference", "off", ONE, env=(("SPECGATE_CPU_KERNELS", "reference"),)),
    # The CPU runtime vLLM recommends left out (issue 40's paired check): specgate's engines
    # and vLLM's server as they ran before it, LD_PRELOAD empty.
    LoadArm("never-one-bare", "off", ONE, env=(("SPECGATE_CPU_RUNTIME", "inherited"),)),
    LoadArm("auto-one-bare", "auto", ONE, env=(("SPECGATE_CPU_RUNTIME", "inherited"),)),
    LoadArm(
        "vllm-plain-all-bare", None, server="vllm", whole_machine=True, env=(("LD_PRELOAD", ""),)
    ),
    LoadArm(
        "vllm-suffix-all-bare",
        None,
        server="vllm",
        speculative_config={"method": "suffix"},
        whole_machine=True,
        env=(("LD_PRELOAD", ""),),
    ),
    # vLLM's own server: its default binding (one core reserved), then every core computing.
    LoadArm("vllm-plain", None, server="vllm"),
    LoadArm("vllm-plain-all", None, server="vllm", whole_machine=True),
    LoadArm("vllm-k5-all", None, server="vllm", speculative_config=_ngram(), whole_machine=True),
    LoadArm(
        "vllm-k2-all",
        None,
        server="vllm",
        speculative_config=_ngram(num_speculative_tokens=2),
        whole_machine=True,
    ),
    # Suffix decoding (arctic-inference) at vLLM's defaults: up to 24 tokens, cut by the
    # tree's own confidence (max_spec_factor, min_token_prob).
    LoadArm(
        "vllm-suffix-all",
        None,
        server="vllm",
        speculative_config={"method": "suffix"},
        whole_machine=True,
    ),
    LoadArm(
        "vllm-suffix-deep-all",
        None,
        server="vllm",
        speculative_config=DEEP_SUFFIX,
        whole_machine=True,
    ),
    # vLLM's speculation by batch size ([[min, max, K], ...], inclusive batch sizes).
    LoadArm(
        "vllm-table1-all",
        None,
        server="vllm",
        speculative_config=_ngram(num_speculative_tokens_per_batch_size=[[1, 1, 5], [2, 1024, 0]]),
        whole_machine=True,
    ),
    LoadArm(
        "vllm-table2-all",
        None,
        server="vllm",
        speculative_config=_ngram(
            num_speculative_tokens_per_batch_size=[[1, 1, 5], [2, 3, 2], [4, 1024, 0]]
        ),
        whole_machine=True,
    ),
)
DEFAULT_ARMS = "never,always,auto,auto-switch"
# The side-by-side comparison (issue 20): vLLM's arms and specgate never speculating on one
# engine are the baselines.
SIDE_BY_SIDE_ARMS = (
    "vllm-plain,vllm-plain-all,vllm-k5-all,vllm-k2-all,vllm-table1-all,vllm-table2-all,"
    "never-one,auto-one,auto-two"
)
# Issue 30's check: under changing load, auto-one is to be no slower than the faster of vLLM
# without speculation and specgate never drafting, and in no phase >5% slower than never-one.
CHANGING_LOAD_ARMS = "vllm-plain-all,never-one,auto-one"
# Named sets for --arms; their baselines are the vLLM arms and never-one.
# Issue 32: the routers over two paced fake replicas on Ray Serve.
RAY_ROUTER_ARMS = "ray2-specgate,ray2-power-of-two,ray2-prefix-affinity"
# Issue 34: through Envoy, specgate's picker against Envoy's least-request (the baseline:
# --baselines envoy2-least-request).
ENVOY_BALANCER_ARMS = "envoy2-picker,envoy2-least-request"
ARM_SETS = {
    "side-by-side": SIDE_BY_SIDE_ARMS,
    "changing-load": CHANGING_LOAD_ARMS,
    "ray-routers": RAY_ROUTER_ARMS,
    "envoy-balancers": ENVOY_BALANCER_ARMS,
}


@dataclass(frozen=True)
class Phase:
    name: str
    requests: int
    # Open loop: exponential inter-arrival gaps of this mean. None: a closed loop.
    mean_gap_s: float | None = None
    concurrency: int | None = None  # closed loop: requests kept in flight

    @property
    def open_loop(self) -> bool:
        return self.mean_gap_s is not None


@dataclass(frozen=True)
class Slot:
    """One scheduled request: every arm sends this prompt at this time (open loop)."""

    index: int
    phase: str
    prompt_id: str
    at_s: float | None  # offset from the schedule's start; None in the closed-loop phase


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


# -- the schedule --------------------------------------------------------------------------------


def phase_plan(args: argparse.Namespace) -> list[Phase]:
    (q1_n, q1_gap), (b_n, b_gap), (q2_n, q2_gap) = args.quiet1, args.burst, args.quiet2
    steady_n, steady_c = args.steady
    phases = [
        Phase("quiet1", q1_n, mean_gap_s=q1_gap),
        Phase("burst", b_n, mean_gap_s=b_gap),
        Phase("quiet2", q2_n, mean_gap_s=q2_gap),
        Phase("steady", steady_n, concurrency=int(steady_c)),
        Phase("single", args.single, concurrency=1),
    ]
    return [p for p in phases if p.requests > 0]


def build_schedule(phases: Sequence[Phase], prompts: Sequence[Prompt], seed: int) -> list[Slot]:
    """The open-loop phases share one timeline (the first request at 0, then a gap drawn with
    the mean of the next request's phase); the closed-loop phase comes after it.

    Prompts are dealt from seeded shuffles of the whole set, a fresh shuffle each time the
    last runs out, so no prompt repeats before every other has been used once.
    """
    gaps = random.Random(f"load_phases:gaps:{seed}")
    deck_rng = random.Random(f"load_phases:prompts:{seed}")
    deck: list[Prompt] = []
    slots: list[Slot] = []
    at = 0.0
    for phase in phases:
        for _ in range(phase.requests):
            if not deck:
                deck = deck_rng.sample(list(prompts), len(prompts))
            prompt = deck.pop()
            scheduled: float | None = None
            if phase.open_loop:
                assert phase.mean_gap_s is not None
                if any(s.at_s is not None for s in slots) and phase.mean_gap_s > 0:
                    at += gaps.expovariate(1.0 / phase.mean_gap_s)
                scheduled = round(at, 3)
            slots.append(Slot(len(slots), phase.name, prompt.id, scheduled))
    return slots


# -- one arm on one server -----------------------------------------------------------------------


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
) -> list[Record]:
    # No connection limit: a pool cap would queue open-loop requests in the client, unseen.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(args.request_timeout, connect=10.0)
    by_id = {p.id: p for p in prompts}
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        run = ArmRun(arm, client, by_id, args, repeat)
        for prompt in prompts[: args.warmup]:
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


# -- the servers, one per arm --------------------------------------------------------------------


def server_groups(args: argparse.Namespace) -> list[tuple[LoadArm, ...]]:
    """One fresh server per arm, or with --shared-server one per distinct set of server args."""
    if not args.shared_server:
        return [(arm,) for arm in args.arms]
    groups: dict[Any, list[LoadArm]] = {}
    for arm in args.arms:
        server = (
            arm.server,
            arm.server_args,
            repr(arm.speculative_config),
            arm.whole_machine,
            arm.env,
        )
        groups.setdefault(server, []).append(arm)
    return [tuple(g) for g in groups.values()]


def server_spec(arm: LoadArm, args: argparse.Namespace, log_dir: Path | None = None) -> ServerSpec:
    """`log_dir`: where a server of several processes (envoy-pool) keeps its parts' logs."""
    name = ("" if arm.server == "vllm" else "specgate-") + arm.name
    env = {**(whole_machine_env() if arm.whole_machine else {}), **dict(arm.env)}
    if arm.server == "vllm":
        speculative = arm.speculative_config or False
        extra = [*arm.server_args, *shlex.split(args.vllm_args)]
        return vllm_spec(args.model_dir, args.model_name, speculative, extra, REPO, env, name)
    if arm.server == "ray-fake":
        return module_spec("bench.ray_fake_server", list(arm.server_args), REPO, name)
    if arm.server == "envoy-pool":
        logs = [] if log_dir is None else ["--log-dir", str(log_dir)]
        return module_spec("bench.envoy_pool", [*arm.server_args, *logs], REPO, name)
    extra = ["--routing-exploration", "0", *arm.server_args, *shlex.split(args.specgate_args)]
    spec = specgate_spec(REPO, extra, name)
    return replace(spec, env=env)


def server_names(
    args: argparse.Namespace, group: tuple[LoadArm, ...], repeat: int
) -> tuple[str, str]:
    """The group's server's name, and its log's (each repeat's server keeps its own log)."""
    first = server_spec(group[0], args).name
    name = first if len(group) == 1 else first + "+" + "+".join(a.name for a in group[1:])
    return name, name if args.repeats == 1 else f"{name}.r{repeat}"


def run_order(args: argparse.Namespace) -> list[tuple[int, tuple[LoadArm, ...]]]:
    """(repeat, server group) in the order they run: --repeats interleaved rounds."""
    return repeats.interleaved(server_groups(args), args.repeats)


def order_names(args: argparse.Namespace) -> list[tuple[int, str]]:
    """The run order by arm names, a shared server's arms joined by '+'."""
    return [(r, "+".join(a.name for a in group)) for r, group in run_order(args)]


def run_all(
    args: argparse.Namespace,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
) -> tuple[list[Record], list[dict[str, Any]]]:
    records: list[Record] = []
    servers: list[dict[str, Any]] = []
    for repeat, group in run_order(args):
        got, info = run_group(args, group, repeat, schedule, phases, prompts)
        records += got
        servers.append(info)
    return records, servers


def run_group(
    args: argparse.Namespace,
    group: tuple[LoadArm, ...],
    repeat: int,
    schedule: Sequence[Slot],
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
) -> tuple[list[Record], dict[str, Any]]:
    """One fresh server for this group's arms, each arm's schedule run once on it."""
    records: list[Record] = []
    name, log_name = server_names(args, group, repeat)
    spec = replace(server_spec(group[0], args, args.out_dir / "logs" / log_name), name=log_name)
    if group[0].server == "specgate":  # to tell a losing round from a winning one (issue 40)
        spec = traced(spec, args.out_dir / "logs")
    info: dict[str, Any] = {
        "name": name,
        "repeat": repeat,
        "argv": spec.argv,
        "arms": [a.name for a in group],
    }
    info["load_avg_before"] = [round(x, 2) for x in os.getloadavg()]
    port = args.port or free_port()
    try:
        with serve(spec, port, args.out_dir / "logs", args.startup_timeout) as server:
            info["startup_s"] = round(server.startup_s, 1)
            info["port"] = port
            for arm in group:
                started = time.perf_counter()
                got = asyncio.run(
                    run_arm(server.base_url, arm, schedule, phases, prompts, args, repeat)
                )
                info.setdefault("arm_wall_s", {})[arm.name] = round(
                    time.perf_counter() - started, 1
                )
                records += got
    except ServerError as exc:
        # One server failing (an unknown flag, say) should not cost the other arms.
        logger.error("%s", exc)
        info["error"] = str(exc)
    info["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return records, info


# -- summaries -----------------------------------------------------------------------------------


@dataclass
class ArmSummary:
    base: report.Summary
    route_shares: dict[str, float]  # x-specgate-route value -> share of served requests
    mean_in_flight: float | None  # this arm's requests open when each was sent
    switched: int  # requests that changed engine mid-stream
    switches: int

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self.base),
            "route_shares": self.route_shares,
            "mean_in_flight_at_send": self.mean_in_flight,
            "switched_requests": self.switched,
            "switches": self.switches,
        }


# A slot in one repeat: repeats of the same slot are different requests.
RunSlot = tuple[int, int]  # (repeat, slot)


def oracle_records(records: Iterable[Record]) -> list[Record]:
    """Per slot (and repeat), the faster (e2e) of never and always, where both served it."""
    by_arm: dict[str, dict[RunSlot, Record]] = {arm: {} for arm in FIXED_ARMS}
    for r in records:
        if r.sample.arm in by_arm and r.sample.ok and r.sample.e2e_s is not None:
            by_arm[r.sample.arm][r.repeat, r.slot] = r
    oracle = []
    for key, never in sorted(by_arm["never"].items()):
        always = by_arm["always"].get(key)
        if always is None:
            continue
        assert never.sample.e2e_s is not None and always.sample.e2e_s is not None
        faster = always if always.sample.e2e_s < never.sample.e2e_s else never
        oracle.append(replace(faster, sample=replace(faster.sample, arm=ORACLE)))
    return oracle


def summarize(records: Sequence[Record]) -> ArmSummary:
    ok = [r for r in records if r.sample.ok]
    routes: dict[str, int] = {}
    for r in ok:
        route = r.sample.route or "?"
        routes[route] = routes.get(route, 0) + 1
    return ArmSummary(
        base=report.summarize([r.sample for r in records], None),
        route_shares={k: v / len(ok) for k, v in sorted(routes.items())},
        mean_in_flight=(
            statistics.fmean(r.in_flight_at_send for r in records) if records else None
        ),
        switched=sum(r.sample.switches > 0 for r in ok),
        switches=sum(r.sample.switches for r in ok),
    )


def summaries(
    records: Sequence[Record], phases: Sequence[str], arms: Sequence[str]
) -> dict[str, dict[str, ArmSummary]]:
    """phase (and "all") -> arm -> summary, for the arms with records in that phase."""
    table: dict[str, dict[str, ArmSummary]] = {}
    for phase in [*phases, ALL]:
        table[phase] = {}
        for arm in arms:
            chosen = [r for r in records if r.sample.arm == arm and phase in (ALL, r.phase)]
            if chosen:
                table[phase][arm] = summarize(chosen)
    return table


def ratios(
    records: Sequence[Record],
    phases: Sequence[str],
    auto_arms: Sequence[str],
    baselines: Sequence[str] = FIXED_ARMS,
) -> dict[str, dict[str, dict[str, Any]]]:
    """phase -> auto arm -> its mean and p90 e2e over the better fixed arm's (and the oracle's).

    Over the slots that the auto arm and every fixed arm that ran all served, so one failed
    request does not tilt a mean. "Better fixed" is whichever fixed arm is lower on that
    statistic; with only one fixed arm run, it is that one. Repeats are pooled: a slot of one
    repeat pairs with the same slot of the same repeat (bench/repeats.py takes ratios per
    repeat instead).
    """
    ok: dict[str, dict[RunSlot, Record]] = {}
    for r in records:
        if r.sample.ok and r.sample.e2e_s is not None:
            ok.setdefault(r.sample.arm, {})[r.repeat, r.slot] = r
    fixed = [a for a in baselines if a in ok]
    result: dict[str, dict[str, dict[str, Any]]] = {}
    if not fixed:
        return result
    for phase in [*phases, ALL]:
        for auto in auto_arms:
            if auto not in ok:
                continue
            slots = set(ok[auto]).intersection(*(ok[a] for a in fixed))
            slots = {s for s in slots if phase in (ALL, ok[auto][s].phase)}
            if not slots:
                continue

            def e2e(arm: str, chosen: set[RunSlot] = slots) -> list[float]:
                return [ok[arm][s].sample.e2e_s or 0.0 for s in sorted(chosen)]

            mean = {a: statistics.fmean(e2e(a)) for a in [*fixed, auto]}
            p90 = {a: report.percentile(e2e(a), 0.9) or 0.0 for a in [*fixed, auto]}
            best_mean = min(mean[a] for a in fixed)
            best_p90 = min(p90[a] for a in fixed)
            row: dict[str, Any] = {
                "slots": len(slots),
                "fixed_arms": fixed,
                **{f"{a}_mean_s": mean[a] for a in fixed},
                **{f"{a}_p90_s": p90[a] for a in fixed},
                "best_fixed_mean_s": best_mean,
                "best_fixed_p90_s": best_p90,
                "arm_mean_s": mean[auto],
                "arm_p90_s": p90[auto],
                "mean_over_best_fixed": mean[auto] / best_mean if best_mean else None,
                "p90_over_best_fixed": p90[auto] / best_p90 if best_p90 else None,
                "oracle_mean_s": None,
                "mean_over_oracle": None,
            }
            if ORACLE in ok:
                oracle_slots = slots & set(ok[ORACLE])
                if oracle_slots:
                    oracle_mean = statistics.fmean(e2e(ORACLE, oracle_slots))
                    row["oracle_slots"] = len(oracle_slots)
                    row["oracle_mean_s"] = oracle_mean
                    row["mean_over_oracle"] = (
                        statistics.fmean(e2e(auto, oracle_slots)) / oracle_mean
                        if oracle_mean
                        else None
                    )
            result.setdefault(phase, {})[auto] = row
    return result


# -- markdown ------------------------------------------------------------------------------------


def schedule_markdown(phases: Sequence[Phase], schedule: Sequence[Slot]) -> str:
    lines = [
        "| phase | requests | loop | mean gap s / concurrency | first s | last s |",
        "|---|--:|---|--:|--:|--:|",
    ]
    for p in phases:
        times = [s.at_s for s in schedule if s.phase == p.name and s.at_s is not None]
        shape = f"{p.mean_gap_s:g}" if p.open_loop else f"{p.concurrency}"
        lines.append(
            f"| {p.name} | {p.requests} | {'open' if p.open_loop else 'closed'} | {shape} "
            f"| {s_cell(min(times)) if times else '-'} | {s_cell(max(times)) if times else '-'} |"
        )
    return "\n".join(lines)


def markdown(
    table: dict[str, dict[str, ArmSummary]],
    ratio_table: dict[str, dict[str, dict[str, Any]]],
) -> str:
    lines = [
        "| phase | arm | n | err | e2e mean s | e2e p90 s | TTFT p50 ms | TTFT p90 ms "
        "| ITL p50 ms | ITL p90 ms | routes | in flight | switched |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    for phase, by_arm in table.items():
        for arm, summary in by_arm.items():
            s = summary.base
            routes = ", ".join(f"{k} {v:.2f}" for k, v in summary.route_shares.items()) or "-"
            lines.append(
                f"| {phase} | {arm} | {s.n} | {s.errors} "
                f"| {s_cell(s.e2e_mean_s)} | {s_cell(s.e2e_p90_s)} "
                f"| {ms_cell(s.ttft_p50_s)} | {ms_cell(s.ttft_p90_s)} | {ms_cell(s.itl_p50_s)} "
                f"| {ms_cell(s.itl_p90_s)} | {routes} | {num_cell(summary.mean_in_flight, 1)} "
                f"| {summary.switched} |"
            )
    lines += [
        "",
        f"`{ORACLE}`: per slot, the faster (e2e) of never and always, only over slots both "
        "served. Under load each arm's latencies depend on its own earlier choices, so this is "
        "an approximation, not an attainable policy. `in flight`: the arm's requests still open "
        "when each was sent (mean). `switched`: requests that changed engine mid-stream.",
        "",
    ]
    if ratio_table:
        lines += [
            "| phase | arm | slots | fixed arms | best fixed mean s | arm mean s "
            "| mean / best fixed | best fixed p90 s | arm p90 s | p90 / best fixed "
            "| mean / oracle |",
            "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for phase, rows in ratio_table.items():
            for arm, r in rows.items():
                lines.append(
                    f"| {phase} | {arm} | {r['slots']} | {', '.join(r['fixed_arms'])} "
                    f"| {s_cell(r['best_fixed_mean_s'])} "
                    f"| {s_cell(r['arm_mean_s'])} | {num_cell(r['mean_over_best_fixed'], 3)} "
                    f"| {s_cell(r['best_fixed_p90_s'])} | {s_cell(r['arm_p90_s'])} "
                    f"| {num_cell(r['p90_over_best_fixed'], 3)} "
                    f"| {num_cell(r['mean_over_oracle'], 3)} |"
                )
        lines.append("")
    return "\n".join(lines)


# -- results -------------------------------------------------------------------------------------


def write_results(
    args: argparse.Namespace,
    started: datetime,
    phases: Sequence[Phase],
    prompts: Sequence[Prompt],
    schedule: Sequence[Slot],
    records: list[Record],
    servers: list[dict[str, Any]],
) -> int:
    arm_names = [a.name for a in args.arms]
    phase_names = [p.name for p in phases]
    over_repeats = repeats.repeat_report(
        records, arm_names, args.baselines, phase_names, order_names(args), args.drift_bound
    )
    for arm in over_repeats.drifted:
        logger.warning("%s: its repeats disagree beyond --drift-bound (see summary.md)", arm)
    records = records + oracle_records(records)
    report_arms = [*arm_names, ORACLE]
    table = summaries(records, phase_names, report_arms)
    auto_arms = [a.name for a in args.arms if a.name not in args.baselines]
    ratio_table = ratios(records, phase_names, auto_arms, args.baselines)
    lag = {
        arm: max(
            (
                r.sent_s - r.scheduled_s
                for r in records
                if r.sample.arm == arm and r.scheduled_s is not None
            ),
            default=None,
        )
        for arm in arm_names
    }
    text = "\n".join(
        [
            f"# `{shlex.join(['python', '-m', 'bench.load_phases', *args.argv])}`",
            "",
            f"{started.isoformat(timespec='seconds')}; {len(prompts)} prompts "
            f"(split {args.split}), max_tokens {args.max_tokens}, seed {args.seed}; "
            f"one fresh server per arm: {not args.shared_server}; {args.repeats} repeats.",
            "",
            schedule_markdown(phases, schedule),
            "",
            "Largest delay of a send past its scheduled time: "
            + ", ".join(f"{arm} {ms_cell(v)} ms" for arm, v in lag.items()),
            "",
            over_repeats.markdown(),
            "## Every repeat pooled",
            "",
            markdown(table, ratio_table),
        ]
    )
    print(text)

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, "-m", "bench.load_phases", *args.argv]),
        "settings": _settings(args),
        "phases": [asdict(p) for p in phases],
        "prompts": {"path": str(args.prompts), "split": args.split, "ids": [p.id for p in prompts]},
        "schedule": [asdict(s) for s in schedule],
        "servers": servers,
        "send_lag_max_s": lag,
        "summary": {
            phase: {arm: s.to_json() for arm, s in by_arm.items()}
            for phase, by_arm in table.items()
        },
        # Both pool every repeat (a slot pairs with the same slot of the same repeat).
        "ratios": ratio_table,
        "repeats": over_repeats.to_json(),
        "samples": [r.to_json() for r in records],
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "summary.md").write_text(text + "\n")
    chart_table = {
        0: {phase: {a: s.base for a, s in by_arm.items()} for phase, by_arm in table.items()}
    }
    report.chart(chart_table, 0, out / "latency.png", f"{args.model_name}: mean e2e per phase")
    logger.info("wrote %s, summary.md and latency.png", out / "results.json")
    return 1 if any("error" in s for s in servers) else 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key == "argv":
            continue
        if key == "arms":
            value = [asdict(a) for a in value]
        settings[key] = str(value) if isinstance(value, Path) else value
    return settings


# -- command line --------------------------------------------------------------------------------

SMOKE_DEFAULTS: dict[str, Any] = {
    "quiet1": (2, 1.0),
    "burst": (3, 0.2),
    "quiet2": (2, 1.0),
    "steady": (3, 2.0),
    "max_tokens": 8,
    "warmup": 1,
    "arm_names": "never,auto",
}


def _pair(text: str) -> tuple[int, float]:
    try:
        count, value = text.split(",")
        pair = (int(count), float(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected COUNT,NUMBER, got {text!r}") from exc
    if pair[0] < 0 or pair[1] < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative numbers, got {text!r}")
    return pair


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load_phases",
        description="Replay a seeded open-loop schedule (quiet, burst, quiet, steady) against "
        "specgate, one server per arm, and compare never / always / auto.",
    )
    parser.add_argument("--prompts", type=Path, default=REPO / "bench" / "prompts.jsonl")
    parser.add_argument(
        "--split",
        choices=("tune", "report", "all"),
        default="report",
        help="only the prompts of this split (the prompt file's `split` field)",
    )
    parser.add_argument(
        "--quiet1", type=_pair, default=(10, 5.0), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--burst", type=_pair, default=(24, 0.35), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--quiet2", type=_pair, default=(10, 5.0), metavar="N,GAP", help="requests, mean gap s"
    )
    parser.add_argument(
        "--steady",
        type=_pair,
        default=(24, 8.0),
        metavar="N,C",
        help="closed loop: requests, concurrency",
    )
    parser.add_argument(
        "--single",
        type=int,
        default=0,
        metavar="N",
        help="after the others, a closed loop of N requests one at a time",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=128, metavar="N", help="override every max_tokens"
    )
    parser.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="every answer exactly --max-tokens long (compare equal work)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the schedule, and requests that set none (-1: send none)",
    )
    parser.add_argument(
        "--arms",
        dest="arm_names",
        metavar="LIST",
        default=DEFAULT_ARMS,
        help=f"comma-separated, from {', '.join(a.name for a in ARM_TABLE)}; "
        + "; ".join(f"'{name}' for {arms}" for name, arms in ARM_SETS.items()),
    )
    parser.add_argument(
        "--baselines",
        metavar="LIST",
        default=None,
        help="arms the others are compared with (the best of them per statistic; over "
        "repeats also each alone, and the first is the other baselines' reference); default "
        "never,always, or with a named --arms set every vLLM arm and never-one",
    )
    parser.add_argument(
        "--repeats",
        type=_positive_int,
        default=1,
        metavar="R",
        help="run every arm R times, each on a fresh server, in interleaved rounds; report "
        "medians and spreads over the repeats",
    )
    parser.add_argument(
        "--drift-bound",
        type=float,
        default=repeats.DEFAULT_DRIFT_BOUND,
        metavar="SHARE",
        help="flag an arm whose overall mean e2e differs across repeats by more than this "
        "share of its median ((max-min)/median)",
    )
    parser.add_argument(
        "--warmup", type=int, default=4, help="unrecorded requests per arm before its schedule"
    )
    parser.add_argument(
        "--shared-server",
        action="store_true",
        help="run arms with the same server args on one server, one after another (auto then "
        "learns from the other arms' traffic)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a quick check: phases of 2-3 requests, max_tokens 8, warmup 1, arms never,auto "
        "(explicit flags still win)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/load_phases/<run id>/"
    )
    parser.add_argument("--model-name", default=MODEL_NAME, help="served model id")
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="for vLLM's server")
    parser.add_argument("--vllm-args", default="", help="extra flags for vLLM's server")
    parser.add_argument("--port", type=int, default=0, help="server port (0: a free one)")
    parser.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument(
        "--specgate-args",
        default="",
        help="extra flags for python -m app (after --routing-exploration 0 and the arm's own)",
    )
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.smoke:
        parser.set_defaults(**SMOKE_DEFAULTS)
    args = parser.parse_args(argv)
    args.argv = argv
    table = {a.name: a for a in ARM_TABLE}
    named_set = args.arm_names in ARM_SETS
    if named_set:
        args.arm_names = ARM_SETS[args.arm_names]
    names = [n.strip() for n in args.arm_names.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--arms: each of {', '.join(table)} at most once, got {args.arm_names!r}")
    args.arms = [table[n] for n in names]
    if args.baselines is None:
        baselines = [a for a in names if a.startswith("vllm") or a == "never-one"]
        args.baselines = baselines if named_set else list(FIXED_ARMS)
    else:
        args.baselines = [n.strip() for n in args.baselines.split(",") if n.strip()]
    if args.steady[0] and args.steady[1] < 1:
        parser.error("--steady needs a concurrency of 1 or more")
    if args.drift_bound <= 0:
        parser.error("--drift-bound must be above 0")
    args.request_seed = None if args.seed < 0 else args.seed
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    prompts = load_prompts(args.prompts, None, args.split)
    if not prompts:
        raise SystemExit(f"no prompts of split {args.split!r} in {args.prompts}")
    phases = phase_plan(args)
    schedule = build_schedule(phases, prompts, args.seed)
    logger.info(
        "%d prompts (split %s), %d scheduled requests, arms %s",
        len(prompts),
        args.split,
        len(schedule),
        ", ".join(a.name for a in args.arms),
    )
    if args.dry_run:
        print(schedule_markdown(phases, schedule))
        for slot in schedule:
            print(f"{slot.index:3d} {slot.phase:7s} {s_cell(slot.at_s):>7s} {slot.prompt_id}")
        print(
            f"servers in run order ({args.repeats} repeats, baselines "
            f"{', '.join(args.baselines)}): {repeats.order_markdown(order_names(args))}"
        )
        return 0
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with recorded_run("bench.load_phases", args.out_dir, args.argv) as run:
        args.out_dir = run.folder
        try:
            records, servers = run_all(args, schedule, phases, prompts)
        except KeyboardInterrupt:
            logger.error("interrupted; the servers are stopped, no results written")
            run.outcome = "interrupted"
            return 130
        code = write_results(args, run.started, phases, prompts, schedule, records, servers)
        run.outcome = "completed" if code == 0 else "failed"
        return code


if __name__ == "__main__":
    raise SystemExit(main())
