"""The replica-ranking rule (app/placement/replica_rank.py) with controlled reports."""

from __future__ import annotations

from collections import Counter

import pytest

from app.drafting.length_rule import CPU_STEP_PRIOR, GPU_STEP_PRIOR, StepCostPrior
from app.placement.replica_rank import (
    HISTORY_MARGIN,
    KV_FULL,
    ReplicaReport,
    Wants,
    rank,
    time_added_ms,
)


def report(name: str, running: int = 0, waiting: int = 0, **more: object) -> ReplicaReport:
    fields: dict[str, object] = {"step_cost": GPU_STEP_PRIOR}
    fields.update(more)
    return ReplicaReport(name, running, waiting, **fields)  # type: ignore[arg-type]


def test_an_idle_replica_comes_before_a_busy_one() -> None:
    busy, idle = report("busy", running=8), report("idle")
    assert rank([busy, idle], Wants(drafts=False)) == ["idle", "busy"]
    assert rank([idle, busy], Wants(drafts=True, prior=0.7)) == ["idle", "busy"]


def test_a_queue_counts_against_a_replica() -> None:
    queued, running = report("queued", running=2, waiting=6), report("running", running=4)
    assert rank([queued, running], Wants(drafts=False)) == ["running", "queued"]


def test_a_full_kv_cache_sends_a_replica_last_whatever_its_batch() -> None:
    full = report("full", kv_use=KV_FULL)
    assert rank([full, report("busy", running=30)], Wants(drafts=False)) == ["busy", "full"]


def test_drafting_pays_more_where_drafts_land_more() -> None:
    # Same batches; drafts land 0.9 on one replica and 0.1 on the other for this class.
    landing = report("landing", running=4, acceptance={"code": 0.9})
    missing = report("missing", running=4, acceptance={"code": 0.1})
    wants = Wants(drafts=True, workload_class="code", prior=0.5)
    assert time_added_ms(landing, wants) < time_added_ms(missing, wants)
    assert rank([missing, landing], wants) == ["landing", "missing"]
    # A request that does not draft cannot tell them apart.
    plain = Wants(drafts=False, workload_class="code")
    assert time_added_ms(landing, plain) == pytest.approx(time_added_ms(missing, plain))


def test_where_verifying_is_dear_a_drafting_request_prefers_the_smaller_batch() -> None:
    # A CPU-like line (every token costs as much as a sequence's decode): the request that
    # drafts adds its drafts to the step the others wait on.
    dear = StepCostPrior(
        base_ms=5.0, per_sequence_ms=0.0, per_token_ms=5.0, per_sequence_drafting_ms=0
    )
    small = report("small", running=1, step_cost=dear)
    large = report("large", running=3, step_cost=dear)
    wants = Wants(drafts=True, prior=0.6)
    assert rank([large, small], wants) == ["small", "large"]
    # The cost to the others grows with their number: more running, more added.
    assert time_added_ms(large, wants) > time_added_ms(small, wants)


def test_the_rule_uses_each_replicas_own_line() -> None:
    gpu = report("gpu", running=8, step_cost=GPU_STEP_PRIOR)
    cpu = report("cpu", running=0, step_cost=CPU_STEP_PRIOR)
    assert rank([cpu, gpu], Wants(drafts=False)) == ["gpu", "cpu"]


def test_a_history_key_goes_to_the_replica_that_holds_it_while_within_the_bound() -> None:
    holder = report("holder", running=3, histories=frozenset({"t1|code"}))
    other = report("other", running=2)
    wants = Wants(drafts=True, prior=0.6, history="t1|code")
    assert rank([other, holder], wants)[0] == "holder"
    # Without the key the lighter replica wins.
    assert rank([other, holder], Wants(drafts=True, prior=0.6))[0] == "other"


def test_past_the_load_bound_a_history_key_spills_to_the_best_other() -> None:
    holder = report("holder", running=9, histories=frozenset({"t1|code"}))
    other = report("other", running=1)
    # total load 11: bound ceil(1.25 * 11 / 2) = 7 < 10.
    assert rank([holder, other], Wants(drafts=True, prior=0.6, history="t1|code")) == [
        "other",
        "holder",
    ]


def test_a_key_leaves_its_history_where_staying_costs_more_than_the_margin() -> None:
    # On the CPU's line a second sequence costs a step about 6 % more: past the margin, so the
    # idle replica takes it, though the load bound alone would let the holder keep it.
    holder = report("holder", running=1, step_cost=CPU_STEP_PRIOR, histories=frozenset({"k"}))
    idle = report("idle", step_cost=CPU_STEP_PRIOR)
    wants = Wants(drafts=True, prior=0.6, history="k")
    assert time_added_ms(holder, wants) > (1 + HISTORY_MARGIN) * time_added_ms(idle, wants)
    assert rank([holder, idle], wants)[0] == "idle"
    # On the GPU's line the same batch costs little more: the key stays with its history.
    gpu_holder = report("holder", running=1, histories=frozenset({"k"}))
    assert rank([report("idle"), gpu_holder], wants)[0] == "holder"


def test_a_new_key_has_one_home_and_keys_spread_over_replicas() -> None:
    replicas = [report(f"r{i}") for i in range(4)]
    homes = Counter()
    for key in range(200):
        wants = Wants(drafts=True, prior=0.6, history=f"tenant-{key}|code")
        first = rank(replicas, wants)[0]
        assert rank(list(reversed(replicas)), wants)[0] == first  # not the order given
        homes[first] += 1
    assert set(homes) == {"r0", "r1", "r2", "r3"}
    assert min(homes.values()) > 25  # about 50 each


def test_no_replicas_no_ranking() -> None:
    assert rank([], Wants(drafts=False)) == []


def test_a_next_turn_goes_back_to_the_replica_holding_its_conversation() -> None:
    # Equal batches on the CPU's line: the replica whose prefix cache holds 900 of the
    # prompt's 1,000 tokens spares a step of 900 tokens that everyone there would wait on.
    left = report("left", running=2, step_cost=CPU_STEP_PRIOR)
    right = report("right", running=2, step_cost=CPU_STEP_PRIOR)
    wants = Wants(drafts=False, prompt_tokens=1000, cached_tokens={"right": 900})
    assert rank([left, right], wants) == ["right", "left"]
    assert rank([left, right], Wants(drafts=False, prompt_tokens=1000))[0] == "left"


def test_a_cached_prefix_is_worth_only_what_it_saves() -> None:
    # 40 cached tokens do not outweigh a batch of 4 more requests.
    busy = report("busy", running=4, step_cost=CPU_STEP_PRIOR)
    idle = report("idle", running=0, step_cost=CPU_STEP_PRIOR)
    small = Wants(drafts=False, prompt_tokens=50, cached_tokens={"busy": 40})
    assert rank([busy, idle], small)[0] == "idle"
    # A long conversation's cache does.
    long = Wants(drafts=False, prompt_tokens=4000, cached_tokens={"busy": 3900})
    assert rank([busy, idle], long)[0] == "busy"


def test_a_long_uncached_prompt_prefers_fewer_requests_to_stall() -> None:
    fewer = report("fewer", running=1, step_cost=CPU_STEP_PRIOR)
    more = report("more", running=4, step_cost=CPU_STEP_PRIOR)
    short, long = Wants(drafts=False, prompt_tokens=10), Wants(drafts=False, prompt_tokens=2000)
    gap_short = time_added_ms(more, short) - time_added_ms(fewer, short)
    gap_long = time_added_ms(more, long) - time_added_ms(fewer, long)
    assert gap_long > gap_short > 0
