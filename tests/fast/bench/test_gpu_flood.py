"""The simulated gateway admission (bench/gpu_sim/admission_gate.py) in front of the
GPU-scale simulator, and the flood scenario's measures (bench/gpu_sim/gpu_flood.py)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

from bench.gpu_sim import gpu_flood
from bench.gpu_sim.admission_gate import AdmissionGate
from bench.gpu_sim.arms import NoSpeculation
from bench.gpu_sim.engine import Simulation
from bench.gpu_sim.workload import SimRequest
from tests.fast.bench.test_gpu_sim import engine, request


def tenant_request(name: str, tenant: str, arrival: float, output: int = 4) -> SimRequest:
    return replace(request(name, 10, output, arrival=arrival), tenant=tenant)


def served_through(gate: AdmissionGate, requests: list[SimRequest]) -> list[SimRequest]:
    setup = engine()
    simulation = Simulation(setup, NoSpeculation(setup), gate=gate)
    simulation.run(requests, lambda now: None)
    return simulation.finished


def flood_then_one_of_b() -> list[SimRequest]:
    """A sends six at once, then B one: one slot, a queue of five."""
    flood = [tenant_request(f"a{i}", "A", 0.0) for i in range(6)]
    return [*flood, tenant_request("b", "B", 0.001)]


def test_first_come_first_served_refuses_past_the_queue_and_serves_in_arrival_order() -> None:
    gate = AdmissionGate(max_running=1, max_queued=5, fair=False)
    finished = served_through(gate, flood_then_one_of_b())
    assert [r.request_id for r in gate.refused] == ["b"]  # the queue was full of A's
    assert [r.request_id for r in finished] == [f"a{i}" for i in range(6)]


def test_the_fair_queue_makes_room_for_b_and_serves_it_next() -> None:
    gate = AdmissionGate(max_running=1, max_queued=5, fair=True)
    finished = served_through(gate, flood_then_one_of_b())
    assert [r.request_id for r in gate.refused] == ["a5"]  # A's newest made room
    # a0 held the slot. B starts waiting at A's counter (idle time is not banked), and the
    # tie goes to A, waiting first: one more of A's, then B, then A's in arrival order.
    assert [r.request_id for r in finished] == ["a0", "a1", "b", "a2", "a3", "a4"]
    assert gate.running == 0


def test_b_s_share_counts_only_tokens_inside_the_window() -> None:
    a = replace(tenant_request("a", "A", 0.0, output=10), first_token_s=0.0, finished_s=10.0)
    b = replace(tenant_request("b", "B", 0.0, output=10), first_token_s=5.0, finished_s=15.0)
    # In [5, 10]: half of A's tokens (5), half of B's (5).
    assert gpu_flood.share_of_b([a, b], 5.0, 10.0) == 0.5
    assert gpu_flood.share_of_b([a, b], 0.0, 5.0) == 0.0


def test_the_flood_runs_and_fair_admission_serves_b_sooner(tmp_path: Path) -> None:
    assert gpu_flood.main(["--seeds", "1", "--out-dir", str(tmp_path)]) == 0
    results = (tmp_path / "results.json").read_text()
    run = json.loads(results)["runs"][0]
    assert run["after"]["b_p90_over_quiet"] < run["before"]["b_p90_over_quiet"]
    assert run["after"]["b_refused"] == 0 < run["before"]["b_refused"]
    assert 0.45 <= run["after"]["b_share_both_backlogged"] <= 0.55
    assert "simulated" in (tmp_path / "summary.md").read_text()


def test_b_asks_the_same_alone_and_in_the_flood() -> None:
    quiet = gpu_flood.Traffic(gpu_flood.periodic("B", 2.0, 20.0))
    flood = gpu_flood.Traffic.merged(
        gpu_flood.poisson("A", 50.0, 20.0, random.Random(1)),
        gpu_flood.periodic("B", 2.0, 20.0),
    )
    alone = gpu_flood.requests(quiet, seed=3)
    flooded = [r for r in gpu_flood.requests(flood, seed=3) if r.tenant == "B"]
    assert len(flood.arrivals) > 10 * len(alone)
    shape = lambda r: (r.arrival_s, r.prompt_tokens, r.output_tokens)  # noqa: E731
    assert [shape(r) for r in flooded] == [shape(r) for r in alone]
