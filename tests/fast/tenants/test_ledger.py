"""The usage ledger: one row a request however often it is written, sums by UTC day and month,
buckets, and 429 counts; and a second ledger on the same file (a restart) sees it all."""

from __future__ import annotations

from pathlib import Path

from app.tenants.ledger import UsageLedger, UsageRecord

DAY = 86400
NOON = 1_797_508_800  # 2026-12-17 12:00 UTC


def usage(
    request_id: str, key: str, at: float, prompt: int = 10, completion: int = 5
) -> UsageRecord:
    return UsageRecord(request_id, key, "m", at, prompt, completion, 8, 6, "ok")


def test_each_request_once_and_sums_by_day_and_month(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path / "usage.sqlite3")
    assert ledger.record(usage("r1", "alpha", NOON))
    assert not ledger.record(usage("r1", "alpha", NOON))  # written again: counted once
    ledger.record(usage("r2", "alpha", NOON + 60, prompt=100))
    ledger.record(usage("r3", "alpha", NOON - DAY))  # yesterday
    ledger.record(usage("r4", "beta", NOON))
    assert ledger.spent("alpha", "2026-12-17") == 15 + 105
    assert ledger.spent("alpha", "2026-12") == 15 + 105 + 15
    assert ledger.spent("alpha", "2026-11") == 0 and ledger.spent("gamma", "2026-12") == 0
    ledger.close()
    reopened = UsageLedger(tmp_path / "usage.sqlite3")  # a restart
    assert reopened.spent("alpha", "2026-12") == 135
    assert reopened.record(usage("r5", "alpha", NOON)) and not reopened.record(
        usage("r2", "alpha", NOON)
    )


def test_buckets_per_key_and_model_with_refusals(tmp_path: Path) -> None:
    ledger = UsageLedger(tmp_path / "usage.sqlite3")
    ledger.record(usage("r1", "alpha", NOON + 10))
    ledger.record(usage("r2", "alpha", NOON + 3500))
    ledger.record(usage("r3", "alpha", NOON + 3700))
    ledger.record(usage("r4", "beta", NOON + 20))
    for _ in range(3):
        ledger.refused("alpha", "m", "rate_limit_exceeded", NOON + 30)
    ledger.refused("gamma", "m", "insufficient_quota", NOON + 7300)
    hourly = ledger.usage(NOON, NOON + 3 * 3600, 3600)
    assert [(r.bucket_start - NOON, r.key_name, r.requests, r.rate_limited) for r in hourly] == [
        (0, "alpha", 2, 3),
        (0, "beta", 1, 0),
        (3600, "alpha", 1, 0),
        (7200, "gamma", 0, 1),
    ]
    first = hourly[0]
    assert (first.prompt_tokens, first.completion_tokens) == (20, 10)
    assert (first.drafted_tokens, first.accepted_tokens) == (16, 12)
    only_beta = ledger.usage(NOON, NOON + DAY, DAY, key_name="beta")
    assert [(r.key_name, r.requests) for r in only_beta] == [("beta", 1)]
