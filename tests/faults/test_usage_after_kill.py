"""The usage ledger under `kill -9` (issue 43): every request a client saw complete before
the kill is in the ledger after a restart, none twice, with the tokens the client was told.

The package's server was killed mid-load and restarted on the same ledger
(tests/faults/kill_mid_load.py); this reads what both told.
"""

from __future__ import annotations

from tests.faults.kill_mid_load import CLIENTS, AfterAKill


def test_the_ledger_keeps_every_completed_request_through_a_kill(after_a_kill: AfterAKill) -> None:
    told, whose = after_a_kill.told, after_a_kill.whose
    assert len(told) >= 8, f"only {len(told)} requests completed before the kill"
    rows = after_a_kill.rows
    kept = {rid: (key, prompt, completion) for rid, key, prompt, completion in rows}
    assert len(kept) == len(rows)  # one row a request
    for rid, told_usage in told.items():
        assert rid in kept, f"{rid} completed for its client but is not in the ledger"
        assert kept[rid] == (
            whose[rid],
            told_usage["prompt_tokens"],
            told_usage["completion_tokens"],
        )
    # At most the requests running at the kill completed in the ledger unseen by a client.
    loaded = [rid for rid, (key, _, _) in kept.items() if key in CLIENTS]
    assert len(loaded) - len(told) <= sum(CLIENTS.values())
    assert sum(1 for key, _, _ in kept.values() if key == "gamma") == 2
    results = [r for bucket in after_a_kill.usage["data"] for r in bucket["results"]]
    for name in CLIENTS:
        assert sum(r["num_model_requests"] for r in results if r["api_key_id"] == name) == sum(
            1 for key, _, _ in kept.values() if key == name
        )


def test_a_limited_key_on_the_real_engine_gets_openai_s_headers(after_a_kill: AfterAKill) -> None:
    """A key of 2 requests a minute in front of the real engine: two answers with OpenAI's
    headers, then a 429 with Retry-After (its 429 is in the ledger too, not a request)."""
    answers = after_a_kill.limited
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers] == ["1", "0", "0"]
    refused = answers[2].json()["error"]
    assert refused["code"] == "rate_limit_exceeded" and refused["type"] == "requests"
    assert 1 <= int(answers[2].headers["retry-after"]) <= 60
