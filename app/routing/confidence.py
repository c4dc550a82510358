"""How often a draft token lands, by the drafter's own confidence in it.

A suffix tree's draft comes with a probability per token: how often, in the earlier text that
matched the context, that token came next. It is a frequency in the tree, not the model's
chance of choosing the token, so it is calibrated: the chance that a draft token lands once
those before it have, learned in bins of the drafter's probability from every step's outcome
(each position up to the first miss is seen; those after it are not). A bin starts as a few
observations at its own midpoint, so a fresh engine takes the drafter at its word, and
evidence moves it from there.

One table per engine, shared by every request: a single request drafts too few tokens to
calibrate anything, and the table learns in the first few hundred steps.
"""

from __future__ import annotations

from collections.abc import Sequence

BINS = 10
# Each bin starts as this many observations at its midpoint.
PRIOR_OBSERVATIONS = 4.0
# Past this many observations a bin halves its counts, so it follows traffic that changes.
MAX_OBSERVATIONS = 2000.0
# No draft token is ever certain: one that always landed is still worth checking.
MOST_LIKELY = 0.99


class ConfidenceCalibration:
    def __init__(self, bins: int = BINS, prior_observations: float = PRIOR_OBSERVATIONS) -> None:
        self._bins = bins
        self._landed = [prior_observations * (b + 0.5) / bins for b in range(bins)]
        self._seen = [prior_observations] * bins

    def _bin(self, probability: float) -> int:
        return min(max(int(probability * self._bins), 0), self._bins - 1)

    def value(self, probability: float) -> float:
        """The chance a draft token the drafter gave `probability` lands, given those
        before it did."""
        b = self._bin(probability)
        return min(self._landed[b] / self._seen[b], MOST_LIKELY)

    def positions(self, probabilities: Sequence[float]) -> tuple[float, ...]:
        return tuple(self.value(p) for p in probabilities)

    def observe(self, probabilities: Sequence[float], hits: int, missed: bool) -> None:
        """One step's outcome for one draft: its first `hits` tokens landed, then the next
        one missed (or the step ended there)."""
        for p in probabilities[:hits]:
            self._count(p, landed=True)
        if missed and hits < len(probabilities):
            self._count(probabilities[hits], landed=False)

    def _count(self, probability: float, landed: bool) -> None:
        b = self._bin(probability)
        self._landed[b] += 1.0 if landed else 0.0
        self._seen[b] += 1.0
        if self._seen[b] > MAX_OBSERVATIONS:
            self._landed[b] /= 2
            self._seen[b] /= 2

    def snapshot(self) -> list[tuple[float, float]]:
        """Each bin's calibrated chance and its observations, lowest probabilities first."""
        pairs = zip(self._landed, self._seen, strict=True)
        return [(landed / seen, seen) for landed, seen in pairs]
