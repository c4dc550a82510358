"""Which CPU cores each embedded engine is bound to."""

from __future__ import annotations

import os

import pytest

from app.engine.vllm.cpu_cores import (
    BIND_VARIABLE,
    bound_to,
    core_plan,
    keep_numba_off_the_cores,
    split_cores,
    whole_machine,
)


def test_two_cores_give_each_engine_one() -> None:
    assert split_cores([1, 0], ["speculative", "plain"]) == {"speculative": [0], "plain": [1]}


def test_an_odd_count_gives_the_last_route_the_spare_core() -> None:
    shares = split_cores([0, 1, 2, 3, 4], ["speculative", "plain"])
    assert shares == {"speculative": [0, 1], "plain": [2, 3, 4]}


@pytest.mark.parametrize(
    ("cores", "routes"), [([0], ["speculative", "plain"]), ([0, 1, 2], ["plain"])]
)
def test_no_split_with_one_core_or_one_engine(cores: list[int], routes: list[str]) -> None:
    assert split_cores(cores, routes) == {}  # type: ignore[arg-type]


def test_the_plan_splits_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BIND_VARIABLE, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    plan = core_plan("split", ["speculative", "plain"])
    assert plan == {"speculative": "0,1", "plain": "2,3"}
    assert core_plan("shared", ["speculative", "plain"]) == {}


def test_an_operators_binding_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BIND_VARIABLE, "0-1")
    assert core_plan("split", ["speculative", "plain"]) == {}


def test_the_binding_is_set_only_while_an_engine_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BIND_VARIABLE, raising=False)
    with bound_to("3"):
        assert os.environ[BIND_VARIABLE] == "3"
    assert BIND_VARIABLE not in os.environ
    with bound_to(None):
        assert BIND_VARIABLE not in os.environ


def test_engines_get_one_numba_thread_unless_the_operator_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NUMBA_THREADING_LAYER", raising=False)
    monkeypatch.setenv("NUMBA_NUM_THREADS", "4")
    keep_numba_off_the_cores()
    assert os.environ["NUMBA_THREADING_LAYER"] == "workqueue"
    assert os.environ["NUMBA_NUM_THREADS"] == "4"


def test_a_lone_engine_computes_on_every_allowed_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BIND_VARIABLE, raising=False)
    allowed = sorted(os.sched_getaffinity(0))
    assert whole_machine() == ",".join(map(str, allowed))
    monkeypatch.setenv(BIND_VARIABLE, "0")
    assert whole_machine() is None
