"""The edit-shaped traffic of bench/edit_traffic.py (fixed, split, each kind what it says) and
its ratios, on made-up answers (no server)."""

from __future__ import annotations

import json

from bench.edit_files import KINDS, RENDER, edit_request, requests
from bench.edit_traffic import Answer, figures, ratios


def test_the_requests_are_fixed_and_the_splits_share_nothing() -> None:
    tune, report = requests("tune"), requests("report")
    assert tune == requests("tune")
    assert {r.prompt for r in tune}.isdisjoint(r.prompt for r in report)
    assert {r.kind for r in report} == set(KINDS)


def test_each_kind_s_prediction() -> None:
    for seed in range(100, 106):
        file = edit_request("file", seed)
        assert file.prompt.endswith(file.prediction)  # the file, as it was, is in the prompt
        # The conversation opens with an earlier edit of a file of the same shape, answered
        # whole; that file is none of the splits'.
        earlier, answered, _ = file.messages
        assert answered["role"] == "assistant" and answered["content"] not in file.prompt
        assert earlier["content"].split("\n\n", 1)[0] != file.prompt.split("\n\n", 1)[0]
        wrong = edit_request("wrong", seed)
        assert wrong.shape == file.shape and wrong.prediction not in wrong.prompt
        text = wrong.prompt.split("\n\n", 1)[1]  # the file after the instruction
        assert len(text) / 2 <= len(wrong.prediction) <= len(text)
        cache = edit_request("cache", seed)
        # The kept rendering is of the records before one value changed; the prompt holds
        # them after, in another form.
        assert cache.previous_prompt is not None and cache.previous_prompt != cache.prompt
        assert cache.prompt.startswith(RENDER) and cache.previous_prompt.startswith(RENDER)
        before = json.loads(cache.prediction)  # a stand-in until a server's answer
        now = [
            dict(p.split("=") for p in line.split(", "))
            for line in cache.prompt[len(RENDER) :].splitlines()
        ]
        changed = [
            i
            for i, (b, n) in enumerate(zip(before, now, strict=True))
            if str(b["port"]) != n["port"]
        ]
        assert len(changed) == 1


def answer(arm: str, repeat: int, seconds: float, tokens: int, level: int = 1) -> Answer:
    return Answer(arm, repeat, "file", level, 0, seconds, tokens, None)


def test_each_cell_is_compared_with_vllm_s_fastest_arm_and_without_the_prediction() -> None:
    answers = [
        answer("vllm-plain-all", 0, 4.0, 100),  # 40 ms a token
        answer("vllm-suffix-all", 0, 2.0, 100),  # 20: the fastest
        answer("auto-one", 0, 3.0, 100),
        answer("auto-one+prediction", 0, 1.0, 100),
        answer("vllm-plain-all", 1, 4.0, 100),
        answer("vllm-suffix-all", 1, 2.5, 100),
        answer("auto-one", 1, 3.0, 100),
        answer("auto-one+prediction", 1, 1.5, 50),  # per token: 30 ms
    ]
    arms = ["vllm-plain-all", "vllm-suffix-all", "auto-one", "auto-one+prediction"]
    found = ratios(answers, arms)
    against_vllm = found["auto-one+prediction / vllm-suffix-all | file | 1"]
    assert against_vllm["by_repeat"] == {"0": 0.5, "1": 1.2}
    assert found["auto-one+prediction / auto-one | file | 1"]["by_repeat"] == {"0": 1 / 3, "1": 1.0}
    assert figures([answer("a", 0, 1.0, 10), answer("a", 0, 3.0, 30)])["ms_per_token"] == 100.0
