"""The draft replay: its proposals against vLLM's ngram proposer, its simulation by hand."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.draft_replay import DraftReplay, NgramConfig, propose
from app.vocabulary import SpecDecodeStats
from tests.fuzz_bodies import fuzz_settings


def config(k: int = 3, min_n: int = 1, max_n: int = 3, max_model_len: int = 1000) -> NgramConfig:
    return NgramConfig(k=k, min_n=min_n, max_n=max_n, max_model_len=max_model_len)


def simulate(prompt: list[int], output: list[int], cfg: NgramConfig) -> DraftReplay:
    drafter = DraftReplay(prompt, cfg)
    drafter.feed(output)
    drafter.finish()
    return drafter


def test_no_match_no_draft() -> None:
    assert propose([1, 2, 3, 4], config()) == []
    assert propose([], config()) == []
    # The suffix itself is no earlier occurrence.
    assert propose([5], config()) == []


def test_longest_ngram_wins_over_an_earlier_shorter_one() -> None:
    # [2, 6] first occurs at 0 (then 10, 11), but [1, 2, 6] matches at 4 (then 20, 21).
    context = [2, 6, 10, 11, 1, 2, 6, 20, 21, 9, 1, 2, 6]
    assert propose(context, config(k=2)) == [20, 21]
    assert propose(context, config(k=2, max_n=2)) == [10, 11]


def test_earliest_occurrence_wins_among_equals() -> None:
    assert propose([1, 2, 30, 1, 2, 40, 1, 2], config(k=2, min_n=2, max_n=2)) == [30, 1]


def test_draft_is_cut_at_the_context_end_and_at_max_model_len() -> None:
    # Overlapping occurrence: [7, 7] at 0 is followed by just one token.
    assert propose([7, 7, 7], config(k=3, min_n=2, max_n=2)) == [7]
    context = [1, 2, 3, 4, 1, 2]
    assert propose(context, config(k=3, min_n=2, max_n=2)) == [3, 4, 1]
    assert propose(context, config(k=3, min_n=2, max_n=2, max_model_len=8)) == [3, 4]
    assert propose(context, config(k=3, min_n=2, max_n=2, max_model_len=6)) == []


def test_repetitive_output_gets_its_drafts_accepted() -> None:
    # Prefill emits 1; then [2, 3] is drafted from the lone 1 and from [2, 3, 1] after it,
    # accepted each time (3 tokens a step), and the last step's draft runs to the end.
    drafter = simulate([1, 2, 3], [1, 2, 3] * 4, config(k=2, max_n=3))
    assert drafter.stats == SpecDecodeStats(drafts=4, draft_tokens=8, accepted_tokens=8)
    assert drafter.steps == 4
    assert drafter.recent_tokens_per_step(1) == 2.0  # the last step: 2 drafts, no bonus
    assert drafter.recent_tokens_per_step(3) == 8 / 3
    assert drafter.recent_tokens_per_step(100) == 11 / 4


def test_stats_of_a_request_by_hand() -> None:
    cfg = config(k=3, min_n=2, max_n=2)
    prompt, output = [1, 2, 3, 4, 5], [1, 2, 3, 4, 9, 9]
    # Prefill: 1. [5, 1]: no draft, emits 2. [1, 2] drafts [3, 4, 5]: 3 and 4 accepted, 9
    # sampled. [4, 9]: no draft, emits the last 9.
    drafter = simulate(prompt, output, cfg)
    assert drafter.stats == SpecDecodeStats(drafts=1, draft_tokens=3, accepted_tokens=2)
    assert drafter.steps == 3
    assert drafter.position == len(output)
    assert drafter.recent_tokens_per_step(2) == 2.0
    assert drafter.recent_tokens_per_step(1) == 1.0

    # Token by token: the same steps, each settled as soon as its tokens are known.
    stepwise = DraftReplay(prompt, cfg)
    assert stepwise.recent_tokens_per_step(5) is None
    seen = []
    for token in output:
        stepwise.feed([token])
        seen.append(stepwise.steps)
    assert seen == [0, 1, 1, 1, 2, 3]
    stepwise.finish()
    assert stepwise.stats == drafter.stats

    # The output ends inside a step (max_tokens): only what the known tokens confirm counts.
    cut = DraftReplay(prompt, cfg)
    cut.feed(output[:4])
    assert cut.steps == 1  # the draft [3, 4, 5] waits for the token after 4
    cut.finish()
    assert cut.stats == SpecDecodeStats(drafts=1, draft_tokens=3, accepted_tokens=2)
    assert cut.steps == 2
    with pytest.raises(ValueError):
        cut.feed([1])


def test_drafts_near_max_model_len() -> None:
    # M = 12, k = 4, prompt [1, 2]. [1, 2, 1] drafts [2, 1] (rejected); the fresh tokens after
    # it draft nothing. At L = 10 the previous step's 9 tokens + k exceed M, so vLLM's model
    # runner drafts zeros, cut by the scheduler to M - L - 1 = 1: [0], accepted here.
    cfg = config(k=4, min_n=1, max_n=1, max_model_len=12)
    drafter = simulate([1, 2], [1, 3, 4, 5, 6, 7, 8, 9, 0, 10], cfg)
    assert drafter.stats == SpecDecodeStats(drafts=2, draft_tokens=3, accepted_tokens=1)
    assert drafter.steps == 8


def test_no_output_and_bad_arguments() -> None:
    drafter = simulate([1, 2, 1], [], config())
    assert drafter.steps == 0 and drafter.stats == SpecDecodeStats(0, 0, 0)
    with pytest.raises(ValueError):
        drafter.recent_tokens_per_step(0)
    with pytest.raises(ValueError):
        NgramConfig(k=3, min_n=0, max_n=2, max_model_len=100)
    with pytest.raises(ValueError):
        NgramConfig(k=3, min_n=3, max_n=2, max_model_len=100)


def vllm_ngram_function() -> Callable[..., Any]:
    """vLLM's `_find_longest_matched_ngram_and_propose_tokens` as plain Python (its py_func).

    Importing vllm.v1.spec_decode.ngram_proposer imports vLLM, torch and its configs (over ten
    seconds); the function needs only numpy, so it is compiled from vLLM's own source.
    """
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "v1/spec_decode/ngram_proposer.py"
    tree = ast.parse(path.read_text(), str(path))
    (function,) = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name == "_find_longest_matched_ngram_and_propose_tokens"
    ]
    function.decorator_list = []  # @jit(nopython=True)
    namespace: dict[str, Any] = {"np": np}
    exec(compile(ast.Module([function], type_ignores=[]), str(path), "exec"), namespace)
    found: Callable[..., Any] = namespace[function.name]
    return found


VLLM_PROPOSE = vllm_ngram_function()

tokens = st.lists(st.integers(0, 3), max_size=40)


@st.composite
def configs(draw: st.DrawFn) -> NgramConfig:
    min_n = draw(st.integers(1, 3))
    return NgramConfig(
        k=draw(st.integers(1, 5)),
        min_n=min_n,
        max_n=draw(st.integers(min_n, min_n + 3)),
        max_model_len=draw(st.integers(1, 90)),
    )


@fuzz_settings(400)
@given(context=tokens, cfg=configs())
def test_propose_matches_vllm(context: list[int], cfg: NgramConfig) -> None:
    expected = VLLM_PROPOSE(
        np.array(context, dtype=np.int64), cfg.min_n, cfg.max_n, cfg.max_model_len, cfg.k
    )
    assert propose(context, cfg) == expected.tolist()


@fuzz_settings(200)
@given(
    prompt=tokens,
    output=tokens,
    cfg=configs(),
    chunks=st.lists(st.integers(1, 6), min_size=1, max_size=50),
)
def test_incremental_proposals_match_propose(
    prompt: list[int], output: list[int], cfg: NgramConfig, chunks: list[int]
) -> None:
    drafter = DraftReplay(prompt, cfg)
    fed = 0
    for step in range(len(output)):
        if fed >= len(output):
            break
        size = chunks[step % len(chunks)]
        drafter.feed(output[fed : fed + size])
        fed += size
        assert drafter.position <= min(fed, len(output))
        assert drafter.proposal() == propose(prompt + output[: drafter.position], cfg)
    drafter.finish()
    assert drafter.position == len(output)
    assert drafter.proposal() == propose(prompt + output, cfg)
    # However the tokens arrive, the simulation is the same.
    whole = simulate(prompt, output, cfg)
    assert (drafter.stats, drafter.steps) == (whole.stats, whole.steps)
    if drafter.steps:
        emitted = drafter.steps * (drafter.recent_tokens_per_step(drafter.steps) or 0)
        assert emitted == pytest.approx(len(output) - 1)  # every token after prefill's
