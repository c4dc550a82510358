"""The arms bench.load_phases compares, by family, and the server each one runs on.

- specgate's own arms: a fixed route (never, always) or `auto`, on two engines or one, over
  each drafter, on Ray Serve, and the CPU-runtime and kernel checks;
- vLLM's own OpenAI server: no speculation, fixed K, its batch-size table, suffix decoding;
- scale-out: paced fake replicas on Ray Serve behind each router (bench/ray_fake_server.py),
  and Envoy in front of two specgate servers, balanced by the picker or by Envoy itself
  (bench/envoy_pool.py).

Named sets (`--arms changing-load`, ...) pick the arms of one comparison.
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.drafters import NGRAM
from app.embedded_model import MODEL_NAME
from bench.servers import (
    MODEL_DIR,
    REPO,
    ServerSpec,
    module_spec,
    specgate_spec,
    vllm_spec,
    whole_machine_env,
)

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


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """The options `server_spec` reads, and how long a server may take to start, for an entry
    point whose arms come from this table (agent_traffic, edit_traffic)."""
    parser.add_argument("--model-name", default=MODEL_NAME)
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--vllm-args", default="", help="extra flags for vLLM's server")
    parser.add_argument("--specgate-args", default="", help="extra flags for python -m app")
    parser.add_argument("--startup-timeout", type=float, default=600.0, metavar="SECONDS")


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
