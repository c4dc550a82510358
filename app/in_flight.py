"""The sequences in flight on each route, now and averaged over any request's life.

The router reads the load now; a finished request's observation carries the load it ran
under, as the time average of the sequences beside it, so step times measured at every load
can be told apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.routing.load_model import Load
from app.vocabulary import Route


@dataclass(frozen=True)
class LoadMark:
    """Where the load integrals stood when a request started."""

    at: float
    plain_area: float
    speculative_area: float


@dataclass
class InFlight:
    clock: Callable[[], float] = time.monotonic
    _count: dict[Route, int] = field(default_factory=lambda: {"plain": 0, "speculative": 0})
    # Sequence-seconds per route since the start, updated at every change.
    _area: dict[Route, float] = field(default_factory=lambda: {"plain": 0.0, "speculative": 0.0})
    _since: float | None = None

    def now(self) -> Load:
        return Load(float(self._count["plain"]), float(self._count["speculative"]))

    def add(self, route: Route, sequences: int) -> LoadMark:
        self._advance()
        mark = self.mark()
        self._count[route] += sequences
        return mark

    def remove(self, route: Route, sequences: int) -> None:
        self._advance()
        self._count[route] = max(0, self._count[route] - sequences)

    def mark(self) -> LoadMark:
        self._advance()
        return LoadMark(self.clock(), self._area["plain"], self._area["speculative"])

    def average_since(self, mark: LoadMark) -> Load:
        """The mean load between `mark` and now (the load now, if no time has passed)."""
        end = self.mark()
        span = end.at - mark.at
        if span <= 0:
            return self.now()
        return Load(
            (end.plain_area - mark.plain_area) / span,
            (end.speculative_area - mark.speculative_area) / span,
        )

    def _advance(self) -> None:
        now = self.clock()
        if self._since is not None:
            elapsed = now - self._since
            for route, count in self._count.items():
                self._area[route] += count * elapsed
        self._since = now
