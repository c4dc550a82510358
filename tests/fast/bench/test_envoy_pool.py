"""The changing-load comparison through Envoy (issue 34) without starting anything: the
stack's one listener, Envoy's configuration without a picker, the paced upstream's engine,
and bench.load_phases' envoy arms, their servers and where their parts log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.drafting.length_rule import CPU_STEP_PRIOR
from app.engine.fakes.paced import PacedFakeEngine
from bench import load_arms, load_phases
from bench.envoy_pool import build_parser, listener
from bench.envoy_stack import Listener, envoy_config
from bench.picker_upstream import build_engine


def test_the_picker_balancing_is_a_picked_listener_and_least_request_is_envoys_own() -> None:
    assert listener("picker", 8000) == Listener("picker", 8000, picked=True)
    assert listener("least-request", 8001) == Listener("least-request", 8001, picked=False)
    with pytest.raises(ValueError, match="round-robin"):
        listener("round-robin", 8002)


def test_the_stack_takes_a_port_and_one_of_two_balancings() -> None:
    args = build_parser().parse_args(["--port", "8000", "--balancing", "least-request"])
    assert (args.port, args.balancing, args.log_dir) == (8000, "least-request", None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--port", "8000", "--balancing", "random"])


def test_envoy_without_a_picker_balances_and_has_no_picker_cluster() -> None:
    upstreams = ["127.0.0.1:9001", "127.0.0.1:9002"]
    config = envoy_config(9000, [listener("least-request", 8000)], upstreams, None)
    [cluster] = config["static_resources"]["clusters"]
    assert (cluster["name"], cluster["lb_policy"]) == ("balanced", "LEAST_REQUEST")
    [chain] = config["static_resources"]["listeners"][0]["filter_chains"]
    manager = chain["filters"][0]["typed_config"]
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]


def test_a_picked_listener_needs_the_picker() -> None:
    with pytest.raises(ValueError, match="picker"):
        envoy_config(9000, [listener("picker", 8000)], ["127.0.0.1:9001"], None)


def test_with_a_picker_the_clusters_are_as_before() -> None:
    config = envoy_config(9000, [listener("picker", 8000)], ["127.0.0.1:9001"], 9100)
    names = [c["name"] for c in config["static_resources"]["clusters"]]
    assert names == ["picked", "picker", "balanced"]


def test_the_paced_upstream_runs_the_ray_benchs_pacing() -> None:
    from bench.ray_fake_server import pacing

    engine = build_engine(paced=True)
    assert isinstance(engine, PacedFakeEngine)
    assert engine.pacing == pacing()
    assert engine.pacing.line == CPU_STEP_PRIOR
    assert engine.facts.per_request_draft_length
    instant = build_engine(paced=False, seconds_per_token=0.01)
    assert not isinstance(instant, PacedFakeEngine)
    assert instant.seconds_per_token == 0.01
    with pytest.raises(SystemExit):
        build_engine(paced=True, seconds_per_token=0.01)


def test_the_envoy_balancers_set_compares_the_picker_with_least_request() -> None:
    args = load_phases.parse_args(
        ["--arms", "envoy-balancers", "--baselines", "envoy2-least-request", "--repeats", "2"]
    )
    assert [a.name for a in args.arms] == ["envoy2-picker", "envoy2-least-request"]
    assert {(a.header, a.server) for a in args.arms} == {("auto", "envoy-pool")}
    assert args.baselines == ["envoy2-least-request"]
    assert load_phases.order_names(args) == [
        (0, "envoy2-picker"), (0, "envoy2-least-request"),
        (1, "envoy2-least-request"), (1, "envoy2-picker"),
    ]  # fmt: skip


def test_an_envoy_arms_server_is_the_stack_with_its_parts_logging_beside_its_own() -> None:
    args = load_phases.parse_args(["--arms", "envoy-balancers", "--repeats", "3"])
    picker, least = args.arms
    name, log_name = load_phases.server_names(args, (picker,), 2)
    assert (name, log_name) == ("specgate-envoy2-picker", "specgate-envoy2-picker.r2")
    logs = Path("/runs/x/logs") / log_name
    spec = load_arms.server_spec(picker, args, logs)
    assert spec.argv == [
        sys.executable, "-m", "bench.envoy_pool", "--balancing", "picker", "--log-dir", str(logs),
    ]  # fmt: skip
    assert load_arms.server_spec(least, args).argv[-2:] == ["--balancing", "least-request"]


def test_other_servers_ignore_the_log_folder() -> None:
    args = load_phases.parse_args(["--arms", "ray2-specgate,never"])
    ray, never = args.arms
    folder = Path("/runs/x/logs/a")
    assert load_arms.server_spec(ray, args, folder) == load_arms.server_spec(ray, args)
    assert load_arms.server_spec(never, args, folder) == load_arms.server_spec(never, args)
    assert load_phases.server_names(args, (never,), 0) == ("specgate-never", "specgate-never")
