"""bench.agent_traffic's conversations and figures, on made-up turns (no server)."""

from __future__ import annotations

import pytest

from bench.agent_sessions import KINDS, sessions
from bench.agent_traffic import Turn, figures, markdown, paired_ratios, summarize


def test_the_splits_have_the_same_shapes_and_different_contents() -> None:
    tune, report = sessions("tune"), sessions("report")
    assert [(s.kind, len(s.turns)) for s in tune] == [(s.kind, len(s.turns)) for s in report]
    assert {s.kind for s in report} == set(KINDS)
    assert not {t for s in tune for t in s.turns} & {t for s in report for t in s.turns}


def turn(arm: str, repeat: int, kind: str, seconds: float, tokens: int, session: str = "s") -> Turn:
    return Turn(arm, repeat, f"{session}-{kind}", kind, 0, seconds, tokens)


def test_time_per_token_is_the_seconds_over_the_tokens_written() -> None:
    turns = [turn("a", 0, "creative", 2.0, 40), turn("a", 0, "tool loop", 1.0, 60)]
    found = figures(turns)
    assert found["ms_per_token"] == pytest.approx(30.0)
    assert found["ms_per_token creative"] == pytest.approx(50.0)
    assert found["conversation_s tool loop"] == pytest.approx(1.0)
    assert found["tokens"] == 100


def test_ratios_pair_each_round_then_take_the_median() -> None:
    turns = [
        turn("auto", 0, "creative", 1.0, 10),
        turn("base", 0, "creative", 2.0, 10),
        turn("auto", 1, "creative", 3.0, 10),
        turn("base", 1, "creative", 4.0, 10),
    ]
    ratio = paired_ratios(turns, "auto", "base", "ms_per_token")
    assert ratio is not None
    assert ratio["by_repeat"] == {"0": 0.5, "1": 0.75}
    assert ratio["median"] == pytest.approx(0.625)
    table = summarize(turns, ["auto", "base"])
    assert table["auto"]["ms_per_token"]["median"] == pytest.approx(200.0)
    text = markdown(table, {"auto / base : ms_per_token": ratio}, "")
    assert "| auto / base | ms_per_token | 0.625" in text
