"""The classifier on labelled examples, and the policy on controlled inputs."""

from __future__ import annotations

import random

import pytest

from app.engine.generation import SamplingOptions
from app.routing.classify import WorkloadClass, classify
from app.routing.features import extract_features
from app.routing.learner import Average, Learner, Observation
from app.routing.load_model import Load
from app.routing.policy import NoRoute, RoutePolicy, RoutingRules, RunningWork
from app.vocabulary import Refusal, Route, SpecDecodeStats
from tests.paths import REPO

PASSAGE = (
    "Our team met on Tuesday to discuss the migration. Alice said the database move "
    "would take two weeks, while Bob thought it could be done in five days if the "
    "schema stayed the same. Everyone agreed to revisit the plan after the audit. "
)
CODE_BLOCK = (
    "def total(items):\n    result = 0\n    for item in items:\n"
    "        result += item.price\n    return result\n"
)
JSON_RECORDS = "".join(f'{{"id": {i}, "name": "user{i}", "active": true}},\n' for i in range(6))


@pytest.mark.parametrize(
    ("prompt", "wants_json", "expected"),
    [
        ("Write a poem about the sea at night.", False, WorkloadClass.OPEN_ENDED),
        ("Tell me a story about a dragon who loves tea.", False, WorkloadClass.OPEN_ENDED),
        ("Write a Python function that checks if a number is prime.", False, WorkloadClass.CODE),
        ("Write a SQL query that counts orders per customer.", False, WorkloadClass.CODE),
        (f"Add type hints to this code:\n{CODE_BLOCK}", False, WorkloadClass.CODE_EDIT),
        (CODE_BLOCK, False, WorkloadClass.CODE_EDIT),
        ("List three colours.", True, WorkloadClass.FRESH_JSON),
        ("Invent a person.", True, WorkloadClass.FRESH_JSON),
        (f"Return the names in this text as a JSON list.\n{PASSAGE}", True,
         WorkloadClass.STRUCTURED),
        (f"Continue this list:\n[\n{JSON_RECORDS}", False, WorkloadClass.STRUCTURED),
        ("Convert this to YAML: name Ada, age 36, city London.", False,
         WorkloadClass.STRUCTURED),
        (f"Rewrite this paragraph more formally:\n{PASSAGE}", False, WorkloadClass.REWRITE),
        (f"Extract every name from the text below.\n{PASSAGE}", False, WorkloadClass.REWRITE),
        ("Fix it.", False, WorkloadClass.OPEN_ENDED),
    ],
)  # fmt: skip
def test_classify(prompt: str, wants_json: bool, expected: WorkloadClass) -> None:
    assert classify(extract_features(prompt, wants_json=wants_json)) is expected


def test_features_measure_repetition_and_compressibility() -> None:
    repetitive = extract_features(f"[\n{JSON_RECORDS * 3}")
    fresh = extract_features("Write a surreal poem about a clock that melts into the sea.")
    assert repetitive.repetition > 0.5 > fresh.repetition
    assert repetitive.compressibility > 0.5 > fresh.compressibility
    assert extract_features("x", temperature=None).temperature == 1.0


def router(learner: Learner | None = None, **rules: object) -> RoutePolicy:
    return RoutePolicy(RoutingRules(**rules), learner or Learner(), random.Random(0))  # type: ignore[arg-type]


JSON_TASK = extract_features(f"Continue:\n[\n{JSON_RECORDS}", temperature=0)
POEM = extract_features("Write a poem about autumn.", temperature=1.0)


def test_the_header_wins_over_everything() -> None:
    pinned = router(pins={WorkloadClass.OPEN_ENDED: "plain"}, exploration=1.0)
    decision = pinned.decide("on", POEM)
    assert (decision.route, decision.basis) == ("speculative", "header")
    assert router().decide("off", JSON_TASK).route == "plain"


def test_priors_speculate_for_copying_work_only() -> None:
    fresh = router()
    structured = fresh.decide("auto", JSON_TASK)
    assert (structured.route, structured.basis) == ("speculative", "learned")
    assert structured.expected_speedup is not None and structured.expected_speedup > 1
    assert fresh.decide("auto", POEM).route == "plain"


def test_a_route_that_cannot_serve_the_request_is_avoided_or_named() -> None:
    drafting = {"speculative": Refusal(("min_p",), "not supported while drafting")}
    pinned = router(pins={WorkloadClass.STRUCTURED: "speculative"}, exploration=1.0)
    decision = pinned.decide("auto", JSON_TASK, refusals=drafting)
    assert (decision.route, decision.basis) == ("plain", "unsupported")
    assert decision.reason == "min_p: not supported while drafting"
    forced = router().decide("on", JSON_TASK, refusals=drafting)
    assert forced == NoRoute("speculative", drafting["speculative"], other_serves=True)
    assert router().decide("off", JSON_TASK, refusals=drafting).route == "plain"
    remote = {"plain": Refusal(("logprobs",), "not supported by remote upstreams")}
    assert router().decide("auto", POEM, refusals=remote).route == "speculative"
    nowhere = router().decide("auto", POEM, refusals={**drafting, **remote})
    assert nowhere == NoRoute("plain", remote["plain"], other_serves=False)


def test_pins_override_the_learner() -> None:
    pinned = router(pins={WorkloadClass.STRUCTURED: "plain"})
    decision = pinned.decide("auto", JSON_TASK)
    assert (decision.route, decision.basis) == ("plain", "pinned")


def seen(route: Route, ms: float, others: Load | None = None, tokens: int = 64) -> Observation:
    return Observation(WorkloadClass.STRUCTURED, route, others or Load(), ms, 1.5, tokens)


def test_latency_feedback_flips_a_class() -> None:
    learner = Learner()
    routed = router(learner)
    assert routed.decide("auto", JSON_TASK).route == "speculative"
    for _ in range(5):  # this server finds drafting slower for structured work
        learner.observe(seen("speculative", 120.0))
        learner.observe(seen("plain", 60.0))
    decision = routed.decide("auto", JSON_TASK)
    assert (decision.route, decision.basis) == ("plain", "learned")
    for _ in range(10):  # and later faster again
        learner.observe(seen("speculative", 20.0))
    assert routed.decide("auto", JSON_TASK).route == "speculative"


def test_the_crossover_is_learned_from_traffic() -> None:
    # A device where drafting wins alone and loses from 2 others in flight: the priors
    # (a CPU's) put the structured crossover elsewhere; the traffic moves it.
    def truth(route: Route, others: float) -> float:
        return 20.0 + 12.0 * others if route == "speculative" else 30.0 + 3.0 * others

    learner = Learner()
    rng = random.Random(1)
    for _ in range(200):
        others = Load(plain=rng.randint(0, 4), speculative=rng.randint(0, 4))
        route: Route = rng.choice(["speculative", "plain"])
        noisy = truth(route, others.total) * rng.uniform(0.95, 1.05)
        learner.observe(seen(route, noisy, others))
    routed = router(learner)
    for total in range(6):
        crowd = Load(plain=total)
        expected = "speculative" if truth("speculative", total) < truth("plain", total) else "plain"
        assert routed.decide("auto", JSON_TASK, crowd).route == expected, total
        for route in ("speculative", "plain"):
            predicted = learner.ms_per_token(WorkloadClass.STRUCTURED, route, crowd)
            assert predicted == pytest.approx(truth(route, total), rel=0.1), (route, total)


def test_the_cost_counts_what_a_request_adds_to_the_running_ones() -> None:
    learner = Learner()
    routed = router(learner)
    alone = routed.cost("speculative", WorkloadClass.STRUCTURED, 64, Load(), ())
    assert alone.added_ms == 0
    running = (RunningWork("plain", 500.0), RunningWork("speculative", 10.0))
    crowded = routed.cost("speculative", WorkloadClass.STRUCTURED, 64, Load(1, 1), running)
    # Each running sequence is slowed for the tokens the two share, at its route's slope.
    slope_plain = learner.load_model.slope("plain", "speculative")
    slope_spec = learner.load_model.slope("speculative", "speculative")
    assert crowded.added_ms == pytest.approx(slope_plain * 64 + slope_spec * 10)
    assert crowded.own_ms > alone.own_ms


def test_low_acceptance_stops_speculation() -> None:
    learner = Learner()
    routed = router(learner, min_acceptance=0.2)
    rejected = SpecDecodeStats(drafts=10, draft_tokens=50, accepted_tokens=2)
    learner.observe_acceptance(WorkloadClass.STRUCTURED, rejected)
    learner.observe_acceptance(WorkloadClass.STRUCTURED, rejected)
    assert routed.decide("auto", JSON_TASK).route == "speculative"  # too few samples yet
    learner.observe_acceptance(WorkloadClass.STRUCTURED, rejected)
    decision = routed.decide("auto", JSON_TASK)
    assert (decision.route, decision.basis) == ("plain", "acceptance")
    # Steps where nothing was drafted carry no evidence.
    learner.observe_acceptance(WorkloadClass.CODE, SpecDecodeStats(0, 0, 0))
    assert learner.acceptance(WorkloadClass.CODE).samples == 0


def test_in_one_engine_low_acceptance_is_left_to_the_engine() -> None:
    learner = Learner()
    rules = RoutingRules(min_acceptance=0.2)
    adaptive = RoutePolicy(rules, learner, random.Random(0), adaptive=True)
    rejected = SpecDecodeStats(drafts=10, draft_tokens=50, accepted_tokens=2)
    for _ in range(3):
        learner.observe_acceptance(WorkloadClass.STRUCTURED, rejected)
    decision = adaptive.decide("auto", JSON_TASK)
    assert (decision.route, decision.basis) == ("speculative", "adaptive")
    assert decision.acceptance_prior == learner.acceptance_prior(WorkloadClass.STRUCTURED)
    assert decision.acceptance_prior is not None and decision.acceptance_prior < 0.68


def test_load_on_the_speculative_engine_sends_work_to_plain() -> None:
    routed = router(max_speculative_load=4)
    assert routed.decide("auto", JSON_TASK, load=Load(plain=1)).basis != "load"
    decision = routed.decide("auto", JSON_TASK, load=Load(plain=3, speculative=1))
    assert (decision.route, decision.basis) == ("plain", "load")


def test_temperature_ceiling() -> None:
    hot = extract_features(f"Continue:\n[\n{JSON_RECORDS}", temperature=1.5)
    decision = router(max_speculative_temperature=1.0).decide("auto", hot)
    assert (decision.route, decision.basis) == ("plain", "temperature")
    assert router().decide("auto", hot).route == "speculative"


def test_exploration_sends_a_share_the_other_way() -> None:
    exploring = router(exploration=0.2)
    bases = [exploring.decide("auto", JSON_TASK).basis for _ in range(2000)]
    share = bases.count("explore") / len(bases)
    assert 0.15 < share < 0.25
    assert all(router().decide("auto", JSON_TASK).basis != "explore" for _ in range(200))


def test_averages_trust_early_observations_then_settle() -> None:
    average = Average(100.0, alpha=0.2)
    average.observe(50.0)
    assert average.value == 75.0  # the prior counts as one sample
    for _ in range(50):
        average.observe(10.0)
    assert average.value == pytest.approx(10.0, abs=0.5)


# The benchmark's labels, and the router classes that serve each of them.
BENCH_LABELS = {
    "code": {WorkloadClass.CODE, WorkloadClass.CODE_EDIT},
    "structured": {WorkloadClass.STRUCTURED, WorkloadClass.FRESH_JSON},
    "edit": {WorkloadClass.REWRITE},
    "open-ended": {WorkloadClass.OPEN_ENDED},
}


def test_classifier_on_the_labelled_benchmark_set() -> None:
    import json
    from collections import Counter

    lines = (REPO / "bench" / "prompts.jsonl").read_text().splitlines()
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for line in lines:
        prompt = json.loads(line)
        if prompt["endpoint"] == "chat":
            text = "\n".join(message["content"] for message in prompt["messages"])
        else:
            text = prompt["prompt"]
        response_format = prompt.get("response_format") or {}
        features = extract_features(
            text,
            wants_json=response_format.get("type") in ("json_object", "json_schema"),
            temperature=prompt["temperature"],
        )
        total[prompt["class"]] += 1
        right[prompt["class"]] += classify(features) in BENCH_LABELS[prompt["class"]]
    assert set(total) == set(BENCH_LABELS) and min(total.values()) >= 20
    assert sum(right.values()) / sum(total.values()) >= 0.95, right
    assert all(right[label] / total[label] >= 0.9 for label in total), right


def test_a_self_repeating_prompt_counts_as_material_to_copy() -> None:
    chant = "The bell rang over the harbour and the boats came home. " * 5
    features = extract_features(chant)
    assert features.repetition > 0.5
    assert classify(features) is WorkloadClass.REWRITE
    assert classify(extract_features(chant[:150])) is WorkloadClass.OPEN_ENDED


def test_a_requests_own_drafting_counts_in_proportion_to_its_evidence() -> None:
    from app.routing.policy import CLASS_YIELD_WEIGHT_STEPS

    learner = Learner()
    learner.observe_replay(WorkloadClass.STRUCTURED, 3.0)  # the class drafts 3 tokens a step
    routed = router(learner)

    def per_token(drafting_now: float | None, steps: int) -> float:
        cost = routed.cost(
            "speculative", WorkloadClass.STRUCTURED, 64, Load(), (), drafting_now, steps
        )
        return cost.own_ms

    usual = per_token(None, 0)
    # A few steps at 1 token each barely move the estimate; many bring it to the request's own.
    few = per_token(1.0, 2)
    many = per_token(1.0, 50 * CLASS_YIELD_WEIGHT_STEPS)
    assert usual < few < 1.2 * usual
    assert many == pytest.approx(3 * usual, rel=0.05)
    # Evidence as strong as the class's own halves the way.
    even = per_token(1.0, CLASS_YIELD_WEIGHT_STEPS)
    assert even == pytest.approx(usual * 3 / 2, rel=1e-6)


def test_one_answer_to_what_a_drafting_engine_serves() -> None:
    from app.dispatch import Dispatcher
    from app.engine.fakes.scripted import FakeEngine
    from app.engine.refusals import drafting_refusal
    from app.main import build_gateway
    from app.routing.policy import ClientChoice
    from app.settings import Settings

    sampled = SamplingOptions(temperature=0.7, min_p=0.1, logit_bias={5: 1.0}, top_k=4)
    refused = drafting_refusal(sampled)
    assert refused is not None and set(refused.fields) == {"min_p", "logit_bias", "top_k"}
    # A request that never drafts is served everything; min_p cuts nothing from greedy.
    assert drafting_refusal(sampled, draft_length=0) is None
    assert drafting_refusal(SamplingOptions(temperature=0, min_p=0.1)) is None
    shared = FakeEngine("speculative", per_request_draft_length=True)
    assert shared.servable(sampled) == refused
    assert shared.servable(sampled, draft_length=0) is None
    # One engine for both routes: its plain route's requests never draft, so it serves them.
    gate = build_gateway(Settings(), {"speculative": shared, "plain": shared})  # type: ignore[dict-item]
    dispatcher: Dispatcher = gate.dispatcher
    decision = dispatcher.decide(ClientChoice("auto"), JSON_TASK, sampled)
    assert (decision.route, decision.basis) == ("plain", "unsupported")
    assert dispatcher.decide(ClientChoice("off"), JSON_TASK, sampled).route == "plain"


def test_a_prediction_goes_where_it_drafts_and_in_one_engine_is_priced_each_step() -> None:
    poem = extract_features("Write a surreal poem about a clock.", temperature=1.2, predicted=True)
    learner = Learner()
    rules = RoutingRules(max_speculative_temperature=1.0, min_acceptance=0.2)
    two = RoutePolicy(rules, learner, random.Random(0)).decide("auto", poem)
    assert (two.route, two.basis, two.acceptance_prior) == ("speculative", "prediction", None)
    one = RoutePolicy(rules, learner, random.Random(0), adaptive=True).decide("auto", poem)
    assert (one.route, one.basis) == ("speculative", "prediction")
    # The engine re-chooses its length every step, as for any request of its class.
    assert one.acceptance_prior == learner.acceptance_prior(classify(poem))
    assert RoutePolicy(rules, learner, random.Random(0)).decide("off", poem).route == "plain"
