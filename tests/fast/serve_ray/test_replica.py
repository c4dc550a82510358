"""A Ray Serve engine replica (app/serve_ray/replica.py) run as Serve would run it, over
the fake engine: what it streams, and the routing report it keeps; and the router's reading
of that report (app/serve_ray/router.py)."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from app.drafting.length_rule import CPU_STEP_PRIOR, StepCostPrior
from app.engine.generation import GenerationRequest, SamplingOptions
from app.serve_ray.replica import EngineRecipe, EngineReplica, history_key
from app.serve_ray.router import LEARNED_AFTER_STEPS, learned_line, report_of, shared_line, wants_of


async def replica() -> EngineReplica:
    made = EngineReplica.__new__(EngineReplica)
    recipe = EngineRecipe(
        fake="app.engine.fakes.scripted:FakeEngine",
        fake_args={
            "route": "speculative",
            "seconds_per_token": 0.01,
            "per_request_draft_length": True,
        },
    )
    await made.__init__(recipe)  # type: ignore[misc]
    return made


def request(
    name: str, draft_length: int | None = None, tenant: str | None = "t", max_tokens: int = 5
) -> GenerationRequest:
    return GenerationRequest(
        name,
        "one two three",
        SamplingOptions(max_tokens=max_tokens),
        draft_length=draft_length,
        tenant=tenant,
        workload_class="code",
    )


async def test_a_replica_streams_its_engines_steps_and_reports_its_batch() -> None:
    served = await replica()
    stream = served.generate(request("a", max_tokens=4))
    first = await anext(stream)  # type: ignore[call-overload]
    assert first.choices[0].text == " one"
    during = served.record_routing_stats()
    assert (during["running"], during["waiting"]) == (1, 0)
    rest = [step.choices[0].text async for step in stream]
    assert "".join(rest) == " two three one"
    after = served.record_routing_stats()
    assert (after["running"], after["waiting"]) == (0, 0)
    assert served.facts().per_request_draft_length
    await served.check_health()
    await served.__del__()


async def test_drafting_requests_leave_their_history_key_and_acceptance_by_class() -> None:
    served = await replica()
    async for _ in served.generate(request("a", draft_length=None, tenant="salt:1")):
        pass
    async for _ in served.generate(request("b", draft_length=0, tenant="salt:2")):
        pass
    stats = served.record_routing_stats()
    # Only the request that drafted left its history here.
    assert stats["histories"] == ["salt:1|code"]
    assert 0.0 < stats["acceptance"]["code"] <= 1.0
    assert len(stats["step_cost"]) == 4
    await served.__del__()


def test_a_history_key_is_a_tenants_class() -> None:
    assert history_key(request("a", tenant="salt:x")) == "salt:x|code"
    assert history_key(request("a", tenant=None)) == "|code"
    unclassified = GenerationRequest("b", "x")
    assert history_key(unclassified) is None


def test_the_router_reads_a_request_and_a_report() -> None:
    wants = wants_of(request("a", draft_length=3))
    assert wants.drafts and wants.max_draft == 3 and wants.history == "t|code"
    plain = wants_of(request("a", draft_length=0))
    assert not plain.drafts and plain.history is None
    line = [5.0, 0.1, 0.2, 0.0]
    stats = {"running": 2, "waiting": 1, "step_cost": line, "step_samples": 100}
    assert learned_line(stats) == StepCostPrior(*line)
    assert learned_line({**stats, "step_samples": LEARNED_AFTER_STEPS - 1}) is None
    # Requests this router has in flight there count, past what the report says.
    report = report_of("r", stats, in_flight=6, line=CPU_STEP_PRIOR)
    assert (report.running, report.waiting) == (5, 1)
    assert report_of("r", stats, in_flight=1, line=CPU_STEP_PRIOR).running == 2
    assert report_of("r", {}, in_flight=0, line=CPU_STEP_PRIOR).load == 0


def test_a_report_taken_while_this_routers_requests_ran_is_not_read_as_busy_after() -> None:
    # Taken while this router had 3 requests there (2 running, 1 waiting): all were its own.
    stats = {"running": 2, "waiting": 1, "reported_at": 100.0}
    ended = report_of("r", stats, in_flight=0, line=CPU_STEP_PRIOR, mine_then=3)
    assert ended.load == 0  # they have all ended since
    # Another router had 2 there as well: those still count, with this router's 1 now.
    shared = {"running": 4, "waiting": 1, "reported_at": 100.0}
    now = report_of("r", shared, in_flight=1, line=CPU_STEP_PRIOR, mine_then=3)
    assert (now.running, now.waiting) == (2, 1)


def test_a_replica_without_a_line_is_priced_by_its_peers() -> None:
    a, b = StepCostPrior(4.0, 0.2, 0.1, 0.0), StepCostPrior(6.0, 0.4, 0.3, 0.2)
    assert astuple(shared_line([a, b])) == pytest.approx((5.0, 0.3, 0.2, 0.1))
    assert shared_line([]) == CPU_STEP_PRIOR
