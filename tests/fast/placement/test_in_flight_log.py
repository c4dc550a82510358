"""A router's own requests in flight, now and when a replica's report was taken."""

from __future__ import annotations

from app.placement.in_flight_log import KEPT_S, InFlightLog, others_in_flight


def test_the_count_at_a_past_moment_is_the_one_then() -> None:
    log = InFlightLog()
    log.add("a", +1, at=10.0)
    log.add("a", +1, at=11.0)
    log.add("a", -1, at=12.0)
    log.add("a", -1, at=13.0)
    assert log.now("a") == 0
    assert [log.at("a", t) for t in (9.0, 10.0, 10.5, 11.5, 12.5, 14.0)] == [0, 1, 1, 2, 1, 0]
    assert log.at("b", 12.0) == 0  # never sent there


def test_a_count_never_goes_below_zero() -> None:
    # A completion Serve reports for a request this router never saw sent.
    log = InFlightLog()
    log.add("a", -1, at=1.0)
    log.add("a", +1, at=2.0)
    assert log.now("a") == 1


def test_a_moment_older_than_what_is_kept_is_unknown() -> None:
    log = InFlightLog()
    log.add("a", +1, at=0.0)
    log.add("a", -1, at=1.0)
    log.add("a", +1, at=KEPT_S + 10.0)
    assert log.at("a", 5.0) == 0  # the change at 1.0 is kept: the count since
    assert log.at("a", 0.5) is None  # the change at 0.0 was let go
    log.keep_only({"b"})
    assert log.now("a") == 0 and log.at("a", 0.5) == 0


def test_a_report_taken_while_this_routers_requests_ran_adds_only_the_others() -> None:
    assert others_in_flight(reported=3, mine_then=2) == 1
    assert others_in_flight(reported=1, mine_then=2) == 0  # a request not arrived yet
    assert others_in_flight(reported=3, mine_then=None) is None
