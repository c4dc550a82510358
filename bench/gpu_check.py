"""`make gpu-check`: what a GPU host runs to see that specgate's per-request drafting works
there, and what it costs against vLLM's own server on the same flags.

On a GPU (auto-detected, or `--platform gpu`): random weights in Llama-3.1-8B's shape and a
Llama-3.2-1B-shape draft (`--load-format dummy`, shape folders made from committed
config.json files and the embedded model's tokenizer; no hub), with vLLM's synthetic
acceptance (random weights make drafts miss). On a CPU, as CI runs it: the embedded model
and a 2-layer truncation of it as the draft, real weights (synthetic acceptance is not
supported by vLLM's CPU sampler).

For each drafting method (n-gram, a draft model) and layout (one, two), on a fresh
specgate server:
- a request asking `on;k=2` verifies drafts, none longer than 2 (usage.speculative_decoding);
- a request sent `off` drafts nothing;
- greedy text is the same both ways;
- inter-token latency with 1, 8 and 32 requests in flight (`auto`, fixed output lengths),
  and the same for vLLM's own server with and without the method.
Writes results.json, summary.md, the manifest and the servers' logs to
bench/results/gpu_check/<run id>/ (or `--out-dir`); exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.drafters import NGRAM
from app.embedded_model import prepare_embedded_model
from app.engine.vllm.cpu_cores import NUMBA_DEFAULTS
from app.settings import Settings
from bench.manifest import recorded_run
from bench.model_folders import make_shape_folder, make_truncated_draft
from bench.servers import ServerProcess, ServerSpec, free_port, serve, serve_together

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "bench" / "gpu_sim" / "model_configs"
NAME = "gpu-check"
PROMPT = "one two three four five six seven eight " * 6
MAX_TOKENS = 64
SYNTHETIC = {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0}


@dataclass(frozen=True)
class Platform:
    gpu: bool
    target: Path
    draft: Path
    quick: bool

    @property
    def model_flags(self) -> list[str]:
        common = ["--served-model-name", NAME, "--max-model-len", "2048"]
        if self.gpu:
            return [*common, "--load-format", "dummy"]
        return [*common, "--kv-cache-memory-bytes", str(256 * 1024 * 1024)]

    def speculative_config(self, method: str) -> dict[str, Any]:
        if method == "ngram":
            config: dict[str, Any] = dict(NGRAM)
        else:
            config = {
                "method": "draft_model",
                "model": str(self.draft),
                "num_speculative_tokens": 5,
            }
        return {**config, **SYNTHETIC} if self.gpu else config

    @property
    def levels(self) -> tuple[int, ...]:
        return (1, 4) if self.quick else (1, 8, 32)

    @property
    def runs(self) -> list[tuple[str, str]]:
        """(method, layout) pairs; the quick run covers n-gram on one engine: each server costs
        CI a minute, the two-engine layout is what tests/engine serves, and a draft model on
        one engine is what tests/draft_model serves."""
        if self.quick:
            return [("ngram", "one")]
        return [(m, layout) for m in ("ngram", "draft_model") for layout in ("one", "two")]


def prepare(gpu: bool, work: Path, quick: bool) -> Platform:
    embedded = prepare_embedded_model(Settings().cache_dir / "models")
    if not gpu:
        return Platform(False, embedded, make_truncated_draft(embedded, work / "draft"), quick)
    target, draft = (
        make_shape_folder(
            json.loads((SHAPES / name / "config.json").read_text()), embedded, work / name
        )
        for name in ("llama-3.1-8b", "llama-3.2-1b")
    )
    return Platform(True, target, draft, quick)


def specgate(platform: Platform, method: str, layout: str) -> ServerSpec:
    argv = [
        sys.executable, "-m", "app", "--model", str(platform.target), *platform.model_flags,
        "--speculative-config", json.dumps(platform.speculative_config(method)),
        "--engine-layout", layout, "--routing-exploration", "0",
    ]  # fmt: skip
    return ServerSpec(f"specgate-{method}-{layout}", argv, ROOT)


def vllm(platform: Platform, method: str | None) -> ServerSpec:
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(platform.target), *platform.model_flags,
    ]  # fmt: skip
    env: dict[str, str] = {}
    if not platform.gpu:
        argv += ["--dtype", "float32", "--enforce-eager"]
    if method is not None:
        argv += ["--speculative-config", json.dumps(platform.speculative_config(method))]
        env = dict(NUMBA_DEFAULTS)  # what specgate gives its CPU engines
    return ServerSpec(f"vllm-{method or 'plain'}", argv, ROOT, env)


async def complete(client: httpx.AsyncClient, header: str | None, stream: bool = False) -> Any:
    body = {
        "model": NAME,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    headers = {"X-Speculative": header} if header else {}
    if not stream:
        response = await client.post("/v1/completions", json=body, headers=headers)
        response.raise_for_status()
        return response.json()
    stamps = []
    async with client.stream(
        "POST", "/v1/completions", json={**body, "stream": True}, headers=headers
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                stamps.append(time.perf_counter())
    return stamps


async def itl_ms(base_url: str, in_flight: int, header: str | None) -> float:
    """Mean inter-token latency of `in_flight` concurrent streams (after a warm-up request)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        await complete(client, header)
        runs = await asyncio.gather(
            *(complete(client, header, stream=True) for _ in range(in_flight))
        )
    gaps = [(s[-1] - s[0]) * 1000 / (len(s) - 1) for s in runs if len(s) > 1]
    return round(statistics.fmean(gaps), 2)


async def checks(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        capped = await complete(client, "on;k=2")
        plain = await complete(client, "off")
    spec = capped["usage"].get("speculative_decoding") or {}
    lengths = spec.get("draft_lengths") or []
    plain_spec = plain["usage"].get("speculative_decoding") or {}
    return {
        "k2_drafts_some": spec.get("draft_tokens", 0) > 0,
        "k2_never_longer_than_2": not any(lengths[2:]),
        "off_drafts_nothing": plain_spec.get("draft_tokens", 0) == 0,
        "greedy_equal": capped["choices"][0]["text"] == plain["choices"][0]["text"],
        "k2_draft_lengths": lengths,
    }


def measure(server: ServerProcess, platform: Platform) -> dict[str, Any]:
    """The checks (specgate's servers) and inter-token latencies of one running server."""
    specgate_server = server.name.startswith("specgate")
    found = asyncio.run(checks(server.base_url)) if specgate_server else {}
    header = "auto" if specgate_server else None
    for level in platform.levels:
        found[f"itl_ms_c{level}"] = asyncio.run(itl_ms(server.base_url, level, header))
    return found


def measure_each(specs: list[ServerSpec], platform: Platform, log_dir: Path) -> dict[str, Any]:
    """Each server measured alone, in turn. The quick run on a CPU starts its two small
    servers together (a minute of CI less); the idle one waits while the other is measured,
    and its figures only need to exist. On a GPU one server at a time holds the device."""
    if platform.quick and not platform.gpu:
        with serve_together(specs, log_dir, startup_timeout_s=900) as servers:
            return {server.name: measure(server, platform) for server in servers}
    found = {}
    for spec in specs:
        with serve(spec, free_port(), log_dir, startup_timeout_s=900) as server:
            found[spec.name] = measure(server, platform)
    return found


def summary(results: dict[str, Any]) -> str:
    levels = [key for key in next(iter(results["servers"].values())) if key.startswith("itl_ms")]
    lines = [
        f"# make gpu-check ({'GPU' if results['gpu'] else 'CPU'}): {results['device']}",
        "",
        "| server | " + " | ".join(levels) + " | checks |",
        "|---|" + "---|" * (len(levels) + 1),
    ]
    for name, found in results["servers"].items():
        passed = [k for k, v in found.items() if isinstance(v, bool)]
        status = "all passed" if all(found[k] for k in passed) else "FAILED"
        lines.append(f"| {name} | " + " | ".join(str(found[k]) for k in levels)
                     + f" | {status if passed else '-'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--platform", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument("--quick", action="store_true", help="fewer runs and loads (CI)")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/gpu_check/<run id>/"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    with recorded_run("bench.gpu_check", args.out_dir, argv) as run:
        code = check(args, run.folder)
        run.outcome = "completed" if code == 0 else "failed"
        return code


def check(args: argparse.Namespace, out: Path) -> int:
    gpu = args.platform == "gpu" or (args.platform == "auto" and shutil.which("nvidia-smi"))
    platform = prepare(bool(gpu), out / "models", args.quick)
    specs = [specgate(platform, method, layout) for method, layout in platform.runs]
    # vLLM's servers are the baselines; the quick run starts its plain one only.
    specs += [
        vllm(platform, m) for m in ((None,) if args.quick else (None, "ngram", "draft_model"))
    ]
    servers = measure_each(specs, platform, out / "logs")
    device = "a GPU host" if gpu else "this CPU"
    results = {"gpu": bool(gpu), "device": device, "quick": args.quick, "servers": servers}
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "summary.md").write_text(summary(results))
    print(summary(results))
    failed = [
        f"{name}: {key}"
        for name, found in servers.items()
        for key, value in found.items()
        if value is False
    ]
    for failure in failed:
        print(f"check failed: {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
