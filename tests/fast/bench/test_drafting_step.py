"""bench.drafting_step's summary of a step trace (no server)."""

from __future__ import annotations

from typing import Any

from bench.drafting_step import summarize


def step(sequences: int, ms: float, draft_tokens: int = 0, new: int = 0) -> dict[str, Any]:
    return {
        "sequences": sequences,
        "tokens": sequences + draft_tokens + 50 * new,
        "drafting": int(draft_tokens > 0),
        "draft_tokens": draft_tokens,
        "new": new,
        "ms": ms,
    }


def test_drafting_steps_are_priced_against_plain_steps_of_the_same_batch() -> None:
    steps = [
        *(step(20, ms) for ms in (66.0, 67.0, 68.0)),
        *(step(20, ms, draft_tokens=5) for ms in (78.0, 79.0, 80.0)),
        step(20, 400.0, new=1),  # a prompt's chunk: not a decode step
        step(19, 10.0),  # another batch size
        step(19, 500.0, draft_tokens=5),
    ]
    summary = summarize(steps, 20)
    assert (summary["plain_steps"], summary["drafting_steps"]) == (3, 3)
    assert (summary["plain_ms"], summary["drafting_ms"]) == (67.0, 79.0)
    assert summary["extra_ms"] == 12.0
    assert summary["extra_ms_per_draft_token"] == 2.4


def test_without_drafting_steps_there_is_no_difference_to_report() -> None:
    summary = summarize([step(20, 67.0)], 20)
    assert summary["drafting_steps"] == 0
    assert "extra_ms" not in summary
