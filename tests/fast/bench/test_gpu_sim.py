"""The GPU-scale simulator (bench/gpu_sim) with controlled inputs: its batching, its prices,
its acceptance sampling, and that its specgate arm runs the policy from app/."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.drafting.draft_plan import DraftPlanner
from app.routing.features import extract_features
from app.routing.policy import RoutePolicy
from bench.gpu_sim import __main__ as runner
from bench.gpu_sim.acceptance import Acceptance, DraftPattern, draw_pattern, with_suffix_drafts
from bench.gpu_sim.arms import FixedK, NoSpeculation, Oracle, Specgate
from bench.gpu_sim.costs import ModelShape, StepPricer, bundled_config
from bench.gpu_sim.engine import (
    EngineSetup,
    NgramDrafter,
    Simulation,
    SuffixDrafter,
    phase_traffic,
)
from bench.gpu_sim.measures import by_phase
from bench.gpu_sim.scenarios import MACHINES, arms, setup, steady
from bench.gpu_sim.workload import RequestMaker, SimRequest

HOST_MS = 1.0


@dataclass
class FlatPricer:
    """10 ms a decode step plus 1 ms per token verified; 0.1 ms per prompt token."""

    def step_ms(
        self, sequences: int, verified_tokens: int, context: int, upper_bound: bool = False
    ) -> float:
        return 10.0 + verified_tokens if sequences else 0.0

    def prefill_ms(self, tokens: int, context: int) -> float:
        return 0.1 * tokens


def engine(**overrides: object) -> EngineSetup:
    fields: dict[str, object] = {
        "name": "flat",
        "target": FlatPricer(),
        "drafter": NgramDrafter(),
        "k": 3,
        "kv_tokens": 1_000_000,
        "host_ms": HOST_MS,
    }
    fields.update(overrides)
    return EngineSetup(**fields)  # type: ignore[arg-type]


def request(
    name: str, prompt: int, output: int, lands: bool = False, arrival: float = 0.0
) -> SimRequest:
    pattern = DraftPattern((lands,) * output, (True,) * output, (1.0 if lands else 0.0,) * output)
    return SimRequest(
        request_id=name,
        workload="code",
        features=extract_features("def f(x):\n    return x\n", temperature=0.0),
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        pattern=pattern,
    )


def serve(setup: EngineSetup, arm: object, requests: list[SimRequest]) -> Simulation:
    simulation = Simulation(setup, arm)  # type: ignore[arg-type]
    simulation.run(requests, lambda now: None)
    return simulation


def test_one_request_prefills_then_decodes_a_token_a_step() -> None:
    setup = engine()
    [served] = serve(setup, NoSpeculation(setup), [request("r", 100, 5)]).finished
    prefill_s = (HOST_MS + 0.1 * 100) / 1000
    decode_s = (10 + 1 + HOST_MS) / 1000  # the flat step, one token, the host
    assert served.first_token_s == pytest.approx(prefill_s)
    assert served.finished_s == pytest.approx(prefill_s + 4 * decode_s)


def test_drafts_that_land_give_k_plus_one_tokens_a_step() -> None:
    setup = engine()
    simulation = serve(setup, FixedK(setup, k=3), [request("r", 10, 9, lands=True)])
    # The prefill's token, then two steps of 1 + 3: nine tokens in three steps.
    assert simulation.log.steps == 3
    assert simulation.log.accepted_tokens == 6
    # A step verifying 4 tokens costs 10 + 4 ms, plus the n-gram drafter and the host.
    [served] = simulation.finished
    assert served.finished_s - served.first_token_s == pytest.approx(2 * (14 + 0.01 + 1) / 1000)


def test_drafts_that_miss_still_give_one_token_a_step() -> None:
    setup = engine()
    simulation = serve(setup, FixedK(setup, k=3), [request("r", 10, 9)])
    assert simulation.log.steps == 9
    assert simulation.log.accepted_tokens == 0
    assert simulation.log.draft_tokens == 8 * 3


def test_max_num_seqs_holds_a_request_until_another_ends() -> None:
    setup = engine(max_num_seqs=2)
    requests = [request("a", 10, 3), request("b", 10, 3), request("c", 10, 3)]
    served = {r.request_id: r for r in serve(setup, NoSpeculation(setup), requests).finished}
    assert served["c"].first_token_s > max(served["a"].finished_s, served["b"].finished_s)  # type: ignore[operator]


def test_a_prompt_longer_than_the_token_budget_is_prefilled_in_chunks() -> None:
    setup = engine(max_batched_tokens=8192)
    simulation = serve(setup, NoSpeculation(setup), [request("r", 10_000, 1)])
    assert simulation.log.steps == 2
    assert simulation.finished[0].first_token_s == pytest.approx((2 * HOST_MS + 1000) / 1000)


def test_kv_capacity_makes_a_request_wait() -> None:
    setup = engine(kv_tokens=140)  # a needs 103, b 43
    requests = [request("a", 100, 3), request("b", 40, 3)]
    served = {r.request_id: r for r in serve(setup, NoSpeculation(setup), requests).finished}
    assert served["b"].first_token_s > served["a"].finished_s  # type: ignore[operator]


def test_the_oracle_drafts_where_drafts_land_and_not_where_they_miss() -> None:
    setup = engine(k=5)
    both = [request("copy", 10, 40, lands=True), request("fresh", 10, 40)]
    simulation = serve(setup, Oracle(setup), both)
    # Every draft the oracle verified landed: it never drafted for the fresh answer.
    assert simulation.log.draft_tokens > 0
    assert simulation.log.accepted_tokens == simulation.log.draft_tokens


def test_acceptance_patterns_follow_their_chances() -> None:
    rng = random.Random(3)
    even = draw_pattern(rng, [(0, Acceptance(0.7, 0.7))], 20_000)
    assert sum(even.lands) / len(even.lands) == pytest.approx(0.7, abs=0.02)
    runs = Acceptance(after_hit=0.95, after_miss=0.2)
    bursty = draw_pattern(rng, [(0, runs)], 20_000)
    assert sum(bursty.lands) / len(bursty.lands) == pytest.approx(runs.mean, abs=0.03)
    never = draw_pattern(rng, [(0, Acceptance(0.9, 0.9, proposes=0.0))], 100)
    assert never.available(0, 5) == 0
    # A change of character part-way: fresh text, then a copy.
    changing = draw_pattern(rng, [(0, Acceptance(0.0, 0.0)), (50, Acceptance(1.0, 1.0))], 100)
    assert not any(changing.lands[:50]) and all(changing.lands[50:])
    assert changing.run_length(45, 5) == 0 and changing.run_length(50, 5) == 5
    assert changing.run_length(98, 5) == 2  # the answer ends


def test_verification_is_priced_as_tokens_through_the_gemms_and_sequences_through_attention() -> (
    None
):
    pricer = StepPricer("meta-llama/Meta-Llama-3.1-8B", "h200_sxm", 1)
    plain = pricer.step_ms(64, 64, 1024)
    verifying = pricer.step_ms(64, 6 * 64, 1024)
    upper = pricer.step_ms(64, 6 * 64, 1024, upper_bound=True)
    assert plain < verifying < upper
    assert verifying == pytest.approx(pricer.non_attention_ms(384) + pricer.attention_ms(64, 1024))
    # Batch 1 is aiconfigurator's own decode step (contexts are priced in buckets of 256).
    handle_step = pricer._handle.decode_step_latency(1, 1024, 2)
    assert pricer.step_ms(1, 1, 1024) == pytest.approx(handle_step, rel=1e-6)


def test_model_shapes_give_the_known_sizes() -> None:
    llama8b = ModelShape.read(bundled_config("meta-llama/Meta-Llama-3.1-8B"))
    assert llama8b.parameters() == pytest.approx(8.03e9, rel=0.01)
    assert llama8b.kv_bytes_per_token(tp=1) == 2 * 32 * 8 * 128 * 2
    draft = ModelShape.read(Path("bench/gpu_sim/model_configs/llama-3.2-1b/config.json"))
    assert draft.parameters() == pytest.approx(1.24e9, rel=0.01)


def test_the_specgate_arm_runs_the_gateways_policy_and_feeds_its_learner() -> None:
    setup = engine(k=5)
    arm = Specgate(setup)
    assert isinstance(arm.policy, RoutePolicy) and arm.policy.adaptive
    assert isinstance(arm.planner, DraftPlanner)
    copy = request("copy", 10, 200, lands=True)
    arm.admit(copy, 0)
    workload = copy.arm_state["workload_class"]
    before = arm.policy.learner.acceptance_prior(workload)  # type: ignore[arg-type]
    simulation = Simulation(setup, arm)
    simulation.run([copy], lambda now: None)
    after = arm.policy.learner.acceptance_prior(workload)  # type: ignore[arg-type]
    assert after > before  # every replayed draft landed
    assert simulation.log.accepted_tokens > 100  # it learned to draft long
    assert arm.planner.step_cost.samples == simulation.log.steps


def test_one_command_writes_labelled_results(tmp_path: Path) -> None:
    runner.main(["--quick", "--out-dir", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["simulated"] is True
    assert results["aiconfigurator_core"]
    [(name, machine)] = results["machines"].items()
    changing = machine["scenarios"]["changing"]
    for arm in ("no-spec", "k5", "table-alone5", "oracle", "specgate"):
        assert changing[arm]["all"]["requests"] > 0
    assert set(results["aims"]) == {f"{name}/specgate", f"{name}/specgate-sized"}
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("# SIMULATED")
    assert (tmp_path / "latency.png").stat().st_size > 10_000


def test_specgate_keeps_drafting_where_drafts_pay_at_32_in_flight() -> None:
    # Seed 1's steady load of 32 (the simulation's tune traffic): before a run of steps
    # without drafts forced a measuring step, the learned line priced drafting out for good
    # here and specgate took 1.57x the oracle's latency.
    machine = MACHINES[0]
    engine_setup = setup(machine)
    made = arms(engine_setup)
    latency = {}
    for name in ("oracle", "specgate"):
        arrivals, follow, phase_of = phase_traffic(steady(32), RequestMaker(machine.method, 1))
        simulation = Simulation(engine_setup, made[name]())
        simulation.run(arrivals, follow)
        latency[name] = by_phase(simulation.finished, phase_of)["c32"]["e2e_mean_s"]
    assert latency["specgate"] < 1.15 * latency["oracle"], latency


def test_suffix_trees_draft_as_far_as_their_match_and_depth_allow() -> None:
    defaults = SuffixDrafter()  # vLLM's: depth 24, factor 1
    assert [defaults.longest(m) for m in (0, 1, 5, 12, 20, 64)] == [0, 1, 5, 12, 12, 12]
    deep = SuffixDrafter(depth=64, factor=2.0)
    assert [deep.longest(m) for m in (1, 10, 21, 40)] == [2, 20, 42, 42]
    pattern = DraftPattern((True,) * 30, (True,) * 30, (1.0,) * 30, match=(3,) * 30)
    assert pattern.available(0, 24, defaults.longest) == 3
    assert pattern.available(0, 2, defaults.longest) == 2  # the engine's K still caps it
    assert pattern.available(0, 24) == 24  # no bound: another drafter's K


def test_a_suffix_match_grows_along_landed_drafts_and_starts_over_after_a_miss() -> None:
    lands = (True, True, True, False, True, False, False)
    proposed = (True, False, False, False, False, False, True)
    plain = DraftPattern(lands, proposed, (0.5,) * len(lands))
    suffix = with_suffix_drafts(random.Random(1), plain, [(0, Acceptance(0.9, 0.1))])
    # Text that keeps following earlier text keeps matching it, proposed or not.
    assert suffix.proposed == (True, True, True, True, False, True, True)
    assert suffix.match == (2, 3, 4, 5, 0, 3, 2)
    assert suffix.lands == lands and suffix.confidence is not None
    assert all(0.0 < c < 1.0 for c in suffix.confidence)


def suffix_request(name: str, output: int, lands: bool, confidence: float) -> SimRequest:
    made = request(name, 10, output, lands=lands)
    made.pattern = with_suffix_drafts(
        random.Random(2),
        made.pattern,
        [(0, Acceptance(confidence, confidence))],
    )
    return made


def test_over_suffix_trees_the_rule_cuts_drafts_that_miss_and_learns_the_drafters_word() -> None:
    setup = engine(drafter=SuffixDrafter(), k=24)
    # Two answers: one repeats earlier text (its drafts land, the drafter is sure), the
    # other does not (nothing lands, the drafter's word is weak).
    served = {}
    for arm in (FixedK(setup, k=24), Specgate(setup)):
        both = [suffix_request("copy", 200, True, 0.95), suffix_request("fresh", 200, False, 0.2)]
        serve(setup, arm, both)
        served[type(arm).__name__] = both
    assert isinstance(arm, Specgate)
    # vLLM's suffix arm verifies every draft offered; specgate's rule stops paying for the
    # fresh answer's and keeps the copy's.
    fixed_copy, fixed_fresh = served["FixedK"]
    rule_copy, rule_fresh = served["Specgate"]
    assert rule_fresh.finished_s < fixed_fresh.finished_s  # type: ignore[operator]
    assert rule_copy.finished_s <= fixed_copy.finished_s * 1.05  # type: ignore[operator]
    # The confidence table learned from the drafts: the copy's confident, long matches
    # landed (well above the 0.95 cell's prior midpoint share of evidence).
    long_matches = arm.planner.calibration.snapshot()[-1]
    assert long_matches[9][1] > 50 and long_matches[9][0] > 0.95


def test_suffix_machines_compare_specgate_with_vllms_suffix_arms() -> None:
    suffix = next(m for m in MACHINES if m.method == "suffix")
    made = arms(setup(suffix))
    for name in ("suffix-defaults", "suffix-deep", "specgate", "oracle"):
        assert name in made
    defaults, deep, rule = made["suffix-defaults"](), made["suffix-deep"](), made["specgate"]()
    assert defaults.setup.k == 24 and defaults.setup.drafter == SuffixDrafter()
    # specgate and vLLM's deep arm run over the same deep trees.
    assert rule.setup.drafter == deep.setup.drafter != defaults.setup.drafter
    assert rule.setup.k == deep.setup.k == 32
