"""End to end: the OpenAI SDK through a real Envoy, which asks specgate's picker for every
request and sends it where the picker said (an ORIGINAL_DST cluster keyed on the header).

Each upstream says in its response who served and what it was sent (bench/picker_upstream.py),
so one response shows the picker's choice and the endpoint that served it.
"""

from __future__ import annotations

from collections import Counter

import openai
import pytest

from bench.picker_upstream import SEEN_DESTINATION, SEEN_SPECULATIVE, SERVED_BY
from tests.envoy.conftest import Stack

MODEL = "SmolLM2-135M-Instruct"
CODE_EDIT = "Fix the bug:\ndef f(x):\n    return x +\nprint(f(1))\n"


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30)


def test_each_request_is_served_by_the_endpoint_the_picker_chose(stack: Stack) -> None:
    served: Counter[str] = Counter()
    with client(stack.picked) as sdk:
        for i in range(8):
            raw = sdk.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"{CODE_EDIT}# case {i}"}],
                max_tokens=8,
            )
            completion = raw.parse()
            assert completion.choices[0].message.content
            chosen = raw.headers[SEEN_DESTINATION]
            assert raw.headers[SERVED_BY] == chosen
            served[chosen] += 1
            # The picker told specgate to draft, and specgate did.
            assert raw.headers[SEEN_SPECULATIVE].startswith("auto;k=")
            assert raw.headers["x-specgate-route"] == "speculative"
    # Picks between two scrapes count as load: a quick run of requests spreads over both.
    assert set(served) == set(stack.upstreams)


def test_a_streamed_request_and_the_clients_own_header(stack: Stack) -> None:
    with (
        client(stack.picked) as sdk,
        sdk.chat.completions.with_streaming_response.create(
            model=MODEL,
            messages=[{"role": "user", "content": CODE_EDIT}],
            max_tokens=8,
            stream=True,
            extra_headers={"X-Speculative": "off"},
        ) as response,
    ):
        pieces = [
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        ]
        assert "".join(pieces)
        assert response.headers[SERVED_BY] == response.headers[SEEN_DESTINATION]
        assert response.headers[SEEN_SPECULATIVE] == "off"
        assert response.headers["x-specgate-route"] == "plain"


def test_the_subset_hint_sends_everything_to_the_endpoints_it_names(stack: Stack) -> None:
    with client(stack.subset) as sdk:
        for _ in range(4):
            raw = sdk.completions.with_raw_response.create(
                model=MODEL, prompt="Hello", max_tokens=4
            )
            assert raw.headers[SERVED_BY] == stack.upstreams[1]


def test_no_endpoint_in_the_hint_is_a_503_from_the_picker(stack: Stack) -> None:
    with client(stack.nowhere) as sdk, pytest.raises(openai.APIStatusError) as raised:
        sdk.completions.create(model=MODEL, prompt="Hello", max_tokens=4)
    assert raised.value.status_code == 503
    assert raised.value.response.headers["retry-after"] == "1"
    assert "subset hint" in raised.value.message


def test_a_large_body_arrives_whole(stack: Stack) -> None:
    # Envoy streams it to the picker in chunks; the picker returns it in chunks of 64 KiB.
    prompt = "Summarize these notes: " + "the quick brown fox jumps over the lazy dog. " * 5000
    with client(stack.picked) as sdk:
        raw = sdk.completions.with_raw_response.create(
            model=MODEL, prompt=prompt, max_tokens=4, echo=True
        )
    assert raw.parse().choices[0].text.startswith(prompt)


def test_envoys_own_least_request_serves_too(stack: Stack) -> None:
    # The baseline bench/picker_latency.py compares with: no picker on this listener.
    with client(stack.balanced) as sdk:
        raw = sdk.completions.with_raw_response.create(model=MODEL, prompt="Hello", max_tokens=4)
    assert raw.headers[SERVED_BY] in stack.upstreams
    assert raw.headers[SEEN_DESTINATION] == ""
