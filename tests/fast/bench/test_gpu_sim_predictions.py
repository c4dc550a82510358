"""Predicted Outputs in the GPU simulator (bench/gpu_sim/predicted_outputs.py): where a
prediction drafts, and what the simulated rule makes of it."""

from __future__ import annotations

from bench.gpu_sim.acceptance import DraftPattern
from bench.gpu_sim.predicted_outputs import ANCHOR_TOKENS, PREDICTION, ratios, run, with_prediction

LENGTH = 60


def trees(lands: bool) -> DraftPattern:
    """The suffix trees' own pattern: every draft lands or none does."""
    return DraftPattern(
        lands=(lands,) * LENGTH,
        proposed=(False,) * LENGTH,
        chance=(0.5,) * LENGTH,
        match=(3,) * LENGTH,
        confidence=(0.5,) * LENGTH,
    )


def test_a_prediction_drafts_everywhere_but_an_edit_and_its_anchor() -> None:
    pattern = with_prediction(trees(lands=False), "file", [(20, 25)])
    assert pattern.predicted is not None
    assert pattern.predicted[19] and pattern.lands[19] and pattern.match_at(19) == 64
    # The edit's first token: the prediction proposes its old text, which misses.
    assert pattern.predicted[20] and not pattern.lands[20]
    # Inside the edit and until the answer matches the prediction again: the trees draft.
    for position in range(21, 25 + ANCHOR_TOKENS):
        assert not pattern.predicted[position] and not pattern.lands[position]
        assert pattern.match_at(position) == 3
    assert pattern.predicted[25 + ANCHOR_TOKENS] and pattern.lands[25 + ANCHOR_TOKENS]


def test_a_wrong_prediction_proposes_once_and_misses() -> None:
    pattern = with_prediction(trees(lands=True), "wrong", [])
    assert pattern.predicted is not None
    assert [i for i, p in enumerate(pattern.predicted) if p] == [1]
    assert not pattern.lands[1] and all(pattern.lands[2:])


def test_the_rule_drafts_a_prediction_far_and_a_wrong_one_costs_little() -> None:
    cells = run(seed=5, scale=0.2, levels=(1,))
    cache = cells["cache-c1"]
    # The trees have nothing to copy for the cache kind; its prediction does.
    assert cache[PREDICTION]["accepted_tokens"] > 2 * cache["specgate"]["accepted_tokens"]
    # Long drafts: more than half the engine's K of 32 landing a step.
    assert cache[PREDICTION]["accepted_tokens"] > 16 * cache[PREDICTION]["steps"], cache
    found = ratios(cells)
    assert found["cache-c1"]["vs_specgate"] < 0.5, found
    assert found["wrong-c1"]["vs_specgate"] < 1.05, found
