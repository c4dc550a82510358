"""The flood benchmark's share measure: tokens served while both keys had work waiting."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from bench.tenant_flood import Done, one, share_to_drain, share_while_both_backlogged


def done(
    key: str, sent: float, first: float | None, finished: float, tokens: int, status: int = 200
) -> Done:
    return Done("after", 0, "both", key, sent, finished - sent, status, tokens, finished, first)


def test_counts_only_the_tokens_served_while_both_keys_wait() -> None:
    records = [
        # A waits from 0 to 10 (a2's first token); B from 2 to 6: the window is 2-6.
        done("A", 0.0, 0.0, 8.0, 80),  # 10 tokens a second; 4 of its 8 s in the window
        done("A", 0.0, 10.0, 12.0, 20),  # served after the window
        done("B", 2.0, 6.0, 8.0, 20),  # served after the window
        done("B", 3.0, 4.0, 6.0, 40),  # served wholly inside it
        done("B", 2.5, None, 2.6, 0, status=429),  # refused: neither waits nor is served
    ]
    assert share_while_both_backlogged(records) == pytest.approx(40 / (40 + 40))
    # The earlier measure counts to the first key's last finish (8.0): 80 of A's, 60 of B's.
    assert share_to_drain(records) == pytest.approx(60 / 140)


def test_no_share_without_a_time_when_both_wait() -> None:
    records = [done("A", 0.0, 1.0, 3.0, 20), done("B", 5.0, 6.0, 8.0, 20)]
    assert share_while_both_backlogged(records) is None


def test_other_phases_are_not_counted() -> None:
    flood = Done("after", 0, "flood", "B", 0.0, 9.0, 200, 500, 9.0, 1.0)
    records = [done("A", 0.0, 4.0, 6.0, 20), done("B", 0.0, 4.0, 6.0, 20), flood]
    assert share_while_both_backlogged(records) is None  # nothing served while both waited


async def test_a_streamed_request_records_its_first_token_and_its_tokens() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"content": " a\u2028b"}}]},  # raw, as vLLM sends
        {"choices": [], "usage": {"completion_tokens": 2}},
    ]
    body = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=(body + "data: [DONE]\n\n").encode())

    transport = httpx.MockTransport(answer)
    async with httpx.AsyncClient(transport=transport, base_url="http://flood") as client:
        t0 = time.perf_counter()
        record = await one(client, "after", 0, "both", "B", t0, 2, stream=True)
    assert (record.status, record.tokens) == (200, 2)
    assert record.first_token_at is not None
    assert 0 <= record.sent_at <= record.first_token_at <= record.finished_at
