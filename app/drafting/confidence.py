"""How often a draft token lands, by the drafter's own confidence in it.

A suffix tree's draft comes with a probability per token (how often, in the earlier text that
matched the context, that token came next) and the length of that match. Neither is the
model's chance of choosing the token: a token that followed the one earlier occurrence of a
two-token match has probability 1 and is often wrong; one that followed a forty-token match
in an earlier answer is nearly always right. So the engine calibrates: the chance that a draft
token lands once those before it have, learned per cell of (the drafter's probability, in
tenths; the match's length, in four ranges) from every step's outcome (each position up to
the first miss is seen; those after it are not). A cell starts as a few observations at its
probability's midpoint, so a fresh engine takes the drafter at its word, and evidence moves
it from there.

One table per engine, shared by every request: a single request drafts too few tokens to
calibrate anything, and the table learns within a few hundred steps.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

BINS = 10
# Match lengths (tokens) where a new range starts: 1-2, 3-5, 6-11, 12 and more.
MATCH_EDGES = (3, 6, 12)
# Each cell starts as this many observations at its probability's midpoint.
PRIOR_OBSERVATIONS = 4.0
# Past this many observations a cell halves its counts, so it follows traffic that changes.
MAX_OBSERVATIONS = 2000.0
# No draft token is ever certain: one that always landed is still worth checking.
MOST_LIKELY = 0.99


class ConfidenceCalibration:
    def __init__(self, prior_observations: float = PRIOR_OBSERVATIONS) -> None:
        cells = BINS * (len(MATCH_EDGES) + 1)
        self._landed = [prior_observations * (c % BINS + 0.5) / BINS for c in range(cells)]
        self._seen = [prior_observations] * cells

    @staticmethod
    def _cell(probability: float, match_length: int) -> int:
        tenth = min(max(int(probability * BINS), 0), BINS - 1)
        return bisect_right(MATCH_EDGES, match_length) * BINS + tenth

    def value(self, probability: float, match_length: int = 0) -> float:
        """The chance a draft token the drafter gave `probability`, from a match of
        `match_length` tokens, lands once those before it have."""
        c = self._cell(probability, match_length)
        return min(self._landed[c] / self._seen[c], MOST_LIKELY)

    def positions(self, probabilities: Sequence[float], match_length: int = 0) -> tuple[float, ...]:
        return tuple(self.value(p, match_length) for p in probabilities)

    def observe(
        self, probabilities: Sequence[float], hits: int, missed: bool, match_length: int = 0
    ) -> None:
        """One step's outcome for one draft: its first `hits` tokens landed, then the next
        one missed (or the step ended there)."""
        for p in probabilities[:hits]:
            self._count(self._cell(p, match_length), landed=True)
        if missed and hits < len(probabilities):
            self._count(self._cell(probabilities[hits], match_length), landed=False)

    def _count(self, cell: int, landed: bool) -> None:
        self._landed[cell] += 1.0 if landed else 0.0
        self._seen[cell] += 1.0
        if self._seen[cell] > MAX_OBSERVATIONS:
            self._landed[cell] /= 2
            self._seen[cell] /= 2

    def snapshot(self) -> list[list[tuple[float, float]]]:
        """Per range of match lengths, shortest first: each tenth of probability's calibrated
        chance and its observations."""
        cells = [
            (landed / seen, seen) for landed, seen in zip(self._landed, self._seen, strict=True)
        ]
        return [cells[start : start + BINS] for start in range(0, len(cells), BINS)]
