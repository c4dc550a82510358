"""What one router has in flight on each replica, now and at a moment past, so that a
replica's report, taken at that moment, can be read for what it says of the others' requests.

A replica reports its running and waiting requests every couple of seconds, and the report
reaches a router later still. Read as it is, a report taken while this router's own requests
ran says the replica is busy after they have ended: on two replicas after a burst, every new
tenant then went to the other one (tests/ray's spread test failed so). The requests this
router sent it knows exactly; a report adds only what others sent: what the report counts,
less what this router had there when the report was taken.
"""

from __future__ import annotations

import bisect
from collections import Counter

# How long back the counts are kept: past any report's age.
KEPT_S = 60.0


class InFlightLog:
    """Per replica: the requests this router has in flight there, and their history."""

    def __init__(self) -> None:
        self._now: Counter[str] = Counter()
        # Per replica: (time, count from then on), in time order.
        self._changes: dict[str, list[tuple[float, int]]] = {}
        self._trimmed: set[str] = set()  # replicas whose oldest changes were let go

    def add(self, replica_id: str, delta: int, at: float) -> None:
        count = max(0, self._now[replica_id] + delta)
        self._now[replica_id] = count
        changes = self._changes.setdefault(replica_id, [])
        changes.append((at, count))
        # Keep the last change before the window: it is the count at the window's start.
        cut = bisect.bisect_left(changes, (at - KEPT_S, -1))
        if cut > 1:
            del changes[: cut - 1]
            self._trimmed.add(replica_id)

    def now(self, replica_id: str) -> int:
        return self._now[replica_id]

    def at(self, replica_id: str, moment: float) -> int | None:
        """The count at `moment`, or None where the log does not reach back that far."""
        changes = self._changes.get(replica_id)
        if not changes:
            return 0  # nothing ever sent there
        index = bisect.bisect_right(changes, (moment, float("inf"))) - 1
        if index < 0:
            # Before the first change kept: none had been sent, unless older ones were let go.
            return None if replica_id in self._trimmed else 0
        return changes[index][1]

    def keep_only(self, replica_ids: set[str]) -> None:
        for gone in set(self._changes) - replica_ids:
            del self._changes[gone]
            self._now.pop(gone, None)
            self._trimmed.discard(gone)


def others_in_flight(reported: int, mine_then: int | None) -> int | None:
    """The requests a report counts that this router did not send (None: cannot tell)."""
    if mine_then is None:
        return None
    return max(0, reported - mine_then)
