"""Benchmark specgate's routing: never, always and auto speculation, against vLLM's own server.

    python -m bench.run                                    # the full run (long)
    python -m bench.run --prompts /tmp/p.jsonl --limit-per-class 1 --max-tokens 16 \
        --concurrency 1,2 --skip-vllm                      # a smoke run

Arms: never / always / auto are specgate with X-Speculative off / on / auto; oracle is
computed per prompt as the faster of never and always; vllm-plain and vllm-spec are vLLM's
OpenAI server without and with the same ngram speculation. One server runs at a time.
See bench/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import signal
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import report
from bench.client import (
    Arm,
    Prompt,
    Sample,
    SpecCounters,
    measure,
    prime,
    request_body,
    spec_counters,
)
from bench.manifest import recorded_run
from bench.prompt_set import CLASSES, load_prompts
from bench.servers import (
    MODEL_DIR,
    MODEL_NAME,
    REPO,
    ServerError,
    ServerSpec,
    free_port,
    serve,
    specgate_spec,
    stop_on_sigterm,
    vllm_spec,
)

logger = logging.getLogger("bench")


SPECGATE_ARMS: tuple[Arm, ...] = (
    Arm("never", "specgate", "off"),
    Arm("always", "specgate", "on"),
    Arm("auto", "specgate", "auto"),
)
VLLM_ARMS: tuple[Arm, ...] = (
    Arm("vllm-plain", "vllm-plain", None, route="plain"),
    Arm("vllm-spec", "vllm-spec", None, route="speculative", scrape_spec_metrics=True),
)
REPORT_ARMS = ("never", "always", "auto", report.ORACLE, "vllm-plain", "vllm-spec")


@dataclass
class Pass:
    """One arm's pass over the prompt list at a level above 1: for aggregate throughput."""

    arm: str
    concurrency: int
    repeat: int
    wall_s: float
    requests: int
    completion_tokens: int
    spec: SpecCounters | None = None


# -- running the arms on one server --------------------------------------------------------------


async def run_server_arms(
    base_url: str, arms: tuple[Arm, ...], prompts: list[Prompt], args: argparse.Namespace
) -> tuple[list[Sample], list[Pass]]:
    samples: list[Sample] = []
    passes: list[Pass] = []
    limits = httpx.Limits(max_connections=max(args.levels) + 4)
    timeout = httpx.Timeout(args.request_timeout, connect=10.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        await warm_up(client, arms, prompts, args)
        for level in args.levels:
            for repeat in range(args.repeats):
                if level == 1:
                    samples += await interleaved_pass(client, arms, prompts, args, repeat)
                    continue
                # Interleaving means nothing with requests in flight together: each arm
                # gets its own pass, so the load in flight is all one arm's.
                for arm in arms:
                    arm_samples, arm_pass = await concurrent_pass(
                        client, arm, prompts, args, level, repeat
                    )
                    samples += arm_samples
                    passes.append(arm_pass)
    return samples, passes


async def warm_up(
    client: httpx.AsyncClient,
    arms: tuple[Arm, ...],
    prompts: list[Prompt],
    args: argparse.Namespace,
) -> None:
    # The first requests on a fresh engine are slow (allocation, first kernels); keep them out.
    for prompt in prompts[: args.warmup]:
        for arm in arms:
            sample = await measure(client, arm, prompt, _body(prompt, args), 1, -1)
            if not sample.ok:
                logger.warning("warm-up %s on %s failed: %s", prompt.id, arm.name, sample.error)


async def interleaved_pass(
    client: httpx.AsyncClient,
    arms: tuple[Arm, ...],
    prompts: list[Prompt],
    args: argparse.Namespace,
    repeat: int,
) -> list[Sample]:
    """Concurrency 1: for each prompt, every arm in turn, so drift hits the arms alike."""
    samples = []
    for prompt in prompts:
        for arm in arms:
            sample = await one_request(client, arm, prompt, args, 1, repeat)
            samples.append(sample)
            _log_sample(sample)
    return samples


async def concurrent_pass(
    client: httpx.AsyncClient,
    arm: Arm,
    prompts: list[Prompt],
    args: argparse.Namespace,
    level: int,
    repeat: int,
) -> tuple[list[Sample], Pass]:
    """The whole prompt list for one arm, with `level` requests in flight."""
    gate = asyncio.Semaphore(level)

    async def gated(prompt: Prompt) -> Sample:
        async with gate:
            return await one_request(client, arm, prompt, args, level, repeat)

    before = await spec_counters(client) if arm.scrape_spec_metrics else None
    started = time.perf_counter()
    samples = list(await asyncio.gather(*(gated(p) for p in prompts)))
    wall = time.perf_counter() - started
    spec = (await spec_counters(client)) - before if before is not None else None
    for sample in samples:
        _log_sample(sample)
    tokens = sum(s.completion_tokens or 0 for s in samples if s.ok)
    return samples, Pass(arm.name, level, repeat, wall, len(samples), tokens, spec)


async def one_request(
    client: httpx.AsyncClient,
    arm: Arm,
    prompt: Prompt,
    args: argparse.Namespace,
    level: int,
    repeat: int,
) -> Sample:
    body = _body(prompt, args)
    if args.prime:
        try:
            await prime(client, arm, prompt, body)
        except httpx.HTTPError as exc:
            logger.warning("priming %s on %s failed: %s", prompt.id, arm.name, exc)
    # vLLM's own server reports acceptance only engine-wide; at level 1 nothing else runs, so
    # the counters' difference across the request is this request's.
    before = await spec_counters(client) if arm.scrape_spec_metrics and level == 1 else None
    sample = await measure(client, arm, prompt, body, level, repeat)
    if before is not None and sample.ok and sample.route == "speculative":
        sample.spec = (await spec_counters(client)) - before
    return sample


def _body(prompt: Prompt, args: argparse.Namespace) -> dict[str, Any]:
    return request_body(prompt, args.model_name, args.max_tokens, args.seed)


def _log_sample(sample: Sample) -> None:
    if not sample.ok:
        logger.warning(
            "%s %s c=%d: %s", sample.arm, sample.prompt_id, sample.concurrency, sample.error
        )
        return
    logger.info(
        "%-10s c=%d r=%d %-16s route=%-11s e2e=%.2fs ttft=%.0fms tokens=%s",
        sample.arm,
        sample.concurrency,
        sample.repeat,
        sample.prompt_id,
        sample.route,
        sample.e2e_s or 0.0,
        (sample.ttft_s or 0.0) * 1000,
        sample.completion_tokens,
    )


# -- the servers, one at a time ------------------------------------------------------------------


def server_plan(args: argparse.Namespace) -> list[tuple[ServerSpec, tuple[Arm, ...]]]:
    by_name = {arm.name: arm for arm in SPECGATE_ARMS}
    specgate_arms = tuple(by_name[name] for name in args.arms)
    plan: list[tuple[ServerSpec, tuple[Arm, ...]]] = [
        (specgate_spec(REPO, shlex.split(args.specgate_args)), specgate_arms)
    ]
    if not args.skip_vllm:
        vllm_args = shlex.split(args.vllm_args)
        for speculative, arm in ((False, VLLM_ARMS[0]), (True, VLLM_ARMS[1])):
            spec = vllm_spec(args.model_dir, args.model_name, speculative, vllm_args, REPO)
            plan.append((spec, (arm,)))
    return plan


def run_plan(
    args: argparse.Namespace, prompts: list[Prompt]
) -> tuple[list[Sample], list[Pass], list[dict[str, Any]]]:
    samples: list[Sample] = []
    passes: list[Pass] = []
    servers: list[dict[str, Any]] = []
    for spec, arms in server_plan(args):
        info: dict[str, Any] = {
            "name": spec.name,
            "argv": spec.argv,
            "arms": [a.name for a in arms],
        }
        servers.append(info)
        # Other work on the machine skews latency; the load average makes that visible.
        info["load_avg_before"] = [round(x, 2) for x in os.getloadavg()]
        port = args.port or free_port()
        try:
            with serve(spec, port, args.out_dir / "logs", args.startup_timeout) as server:
                info["startup_s"] = round(server.startup_s, 1)
                info["port"] = port
                got, got_passes = asyncio.run(run_server_arms(server.base_url, arms, prompts, args))
                samples += got
                passes += got_passes
        except ServerError as exc:
            # One server failing should not cost the others' results.
            logger.error("%s", exc)
            info["error"] = str(exc)
        info["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    return samples, passes, servers


# -- results -------------------------------------------------------------------------------------


def write_results(
    args: argparse.Namespace,
    started: datetime,
    prompts: list[Prompt],
    samples: list[Sample],
    passes: list[Pass],
    servers: list[dict[str, Any]],
) -> int:
    samples = samples + report.oracle_samples(samples)
    table = report.summaries(samples, REPORT_ARMS, CLASSES, args.levels)
    ratio_table = report.ratios(samples, CLASSES, args.levels)
    fill_pass_acceptance(table, passes)
    overhead = report.gateway_overhead(table)
    throughput = aggregate_throughput(passes)
    print(report.markdown(table, ratio_table, overhead, throughput))

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results = {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, "-m", "bench.run", *args.argv]),
        "settings": _settings(args),
        "prompts": {
            "path": str(args.prompts),
            "ids": [p.id for p in prompts],
            "per_class": {c: sum(p.cls == c for p in prompts) for c in CLASSES},
        },
        "servers": servers,
        "summary": report.to_jsonable(table),
        "ratios": {str(level): r for level, r in ratio_table.items()},
        "gateway_overhead": {str(level): r for level, r in overhead.items()},
        "aggregate_tokens_per_s": {str(level): r for level, r in throughput.items()},
        "classification": classification(samples),
        "passes": [asdict(p) for p in passes],
        "samples": [asdict(s) for s in samples],
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    level = 1 if 1 in table else min(table)
    report.chart(
        table,
        level,
        out / "latency.png",
        f"{args.model_name}: mean e2e latency per class, concurrency {level}",
    )
    logger.info("wrote %s and %s", out / "results.json", out / "latency.png")
    return 1 if any("error" in s for s in servers) else 0


def classification(samples: list[Sample]) -> dict[str, dict[str, int]]:
    """Prompt-set class -> specgate's own class (x-specgate-class) -> count, from auto's requests.

    The two vocabularies differ; this shows which of specgate's classes each prompt class
    lands in, which is where an auto misroute usually starts.
    """
    counts: dict[str, dict[str, int]] = {}
    for s in samples:
        if s.arm == "auto" and s.served_class is not None:
            by_served = counts.setdefault(s.cls, {})
            by_served[s.served_class] = by_served.get(s.served_class, 0) + 1
    return counts


def fill_pass_acceptance(
    table: dict[int, dict[str, dict[str, report.Summary]]], passes: list[Pass]
) -> None:
    """Above level 1 vLLM's own server gives acceptance per pass only: fill it in for "all"."""
    for level, by_class in table.items():
        for arm, summary in by_class.get(report.ALL, {}).items():
            counted = [p.spec for p in passes if p.concurrency == level and p.arm == arm]
            if summary.acceptance_rate is not None or not counted:
                continue
            drafted = sum(c.draft_tokens for c in counted if c is not None)
            accepted = sum(c.accepted_tokens for c in counted if c is not None)
            summary.acceptance_rate = accepted / drafted if drafted else None


def aggregate_throughput(passes: list[Pass]) -> dict[int, dict[str, float]]:
    totals: dict[int, dict[str, list[float]]] = {}
    for p in passes:
        slot = totals.setdefault(p.concurrency, {}).setdefault(p.arm, [0.0, 0.0])
        slot[0] += p.completion_tokens
        slot[1] += p.wall_s
    return {
        level: {arm: tokens / wall for arm, (tokens, wall) in arms.items() if wall > 0}
        for level, arms in totals.items()
    }


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    settings.pop("argv", None)
    settings["engines"] = (
        "float32, enforce_eager, kv_cache_memory_bytes=512 MiB; speculative: ngram K=5, window 2-5"
    )
    return settings


# -- command line --------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Benchmark never / always / auto speculation in specgate against vLLM.",
    )
    parser.add_argument("--prompts", type=Path, default=REPO / "bench" / "prompts.jsonl")
    parser.add_argument("--limit-per-class", type=int, default=None, metavar="N")
    parser.add_argument(
        "--split",
        choices=("tune", "report", "all"),
        default="all",
        help="only the prompts of this split (the prompt file's `split` field)",
    )
    parser.add_argument(
        "--shape", default=None, help="only the prompts of this `shape` (e.g. changing)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, metavar="N", help="override every max_tokens"
    )
    parser.add_argument(
        "--concurrency", default="1,8", help="comma-separated levels of requests in flight"
    )
    parser.add_argument("--repeats", type=int, default=1, help="passes over the prompt list")
    parser.add_argument(
        "--warmup", type=int, default=2, help="unrecorded prompts per arm at each server start"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for prompts that set none (-1: send none)"
    )
    parser.add_argument(
        "--no-prime",
        dest="prime",
        action="store_false",
        help="skip the unrecorded 1-token request that warms each prompt's prefix cache",
    )
    parser.add_argument(
        "--arm-order",
        default="never,always,auto",
        help="order of specgate's arms per prompt at concurrency 1 (and of their passes above)",
    )
    parser.add_argument("--skip-vllm", action="store_true", help="skip vLLM's own server")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/run/<run id>/"
    )
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="for vLLM's server")
    parser.add_argument("--model-name", default=MODEL_NAME, help="served model id")
    parser.add_argument("--port", type=int, default=0, help="server port (0: a free one)")
    parser.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--request-timeout", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--specgate-args", default="", help="extra flags for python -m app")
    parser.add_argument("--vllm-args", default="", help="extra flags for vLLM's server")
    args = parser.parse_args(argv)
    args.argv = argv
    args.arms = [a.strip() for a in args.arm_order.split(",") if a.strip()]
    if sorted(args.arms) != sorted(a.name for a in SPECGATE_ARMS):
        parser.error("--arm-order must name never, always and auto once each")
    args.levels = sorted({int(c) for c in args.concurrency.split(",") if c.strip()})
    if not args.levels or min(args.levels) < 1:
        parser.error("--concurrency needs levels of 1 or more")
    if args.seed < 0:
        args.seed = None
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    prompts = load_prompts(args.prompts, args.limit_per_class, args.split, args.shape)
    if not prompts:
        raise SystemExit(f"no prompts in {args.prompts}")
    logger.info(
        "%d prompts, levels %s, %d repeat(s), max_tokens override %s",
        len(prompts),
        args.levels,
        args.repeats,
        args.max_tokens,
    )
    with recorded_run("bench.run", args.out_dir, args.argv) as run:
        args.out_dir = run.folder
        try:
            samples, passes, servers = run_plan(args, prompts)
        except KeyboardInterrupt:
            logger.error("interrupted; the servers are stopped, no results written")
            run.outcome = "interrupted"
            return 130
        code = write_results(args, run.started, prompts, samples, passes, servers)
        run.outcome = "completed" if code == 0 else "failed"
        return code


if __name__ == "__main__":
    raise SystemExit(main())
