"""Recursive least squares with forgetting: a line fitted online, one observation at a time.

Used wherever specgate learns a cost from traffic: the gateway's milliseconds per token
under load (app/routing/load_model.py) and the engine's milliseconds per step
(app/drafting/length_rule.py). Priors act as a few pseudo-observations, so a fresh server starts
from them and traffic replaces them.
"""

from __future__ import annotations

from collections.abc import Sequence

Vector = list[float]
Matrix = list[list[float]]


class RecursiveLeastSquares:
    """y ≈ θ·x, with θ starting at `prior` and older observations fading by `forgetting`."""

    def __init__(
        self,
        prior: Sequence[float],
        prior_weight: float | Sequence[float],
        forgetting: float,
        windup: float = 1.0,
    ) -> None:
        """`prior_weight`: the prior's information, for all coefficients or one each (a
        coefficient whose feature runs to large values needs a larger weight to hold as
        firmly: a pseudo-observation at feature value s carries s squared). `windup`: how far
        past its prior's uncertainty a direction traffic never excites may grow."""
        size = len(prior)
        self.theta: Vector = list(prior)
        weights = [prior_weight] * size if isinstance(prior_weight, float | int) else prior_weight
        # The inverse information matrix: a small diagonal says the prior is well known.
        self._p: Matrix = [
            [1.0 / weights[i] if i == j else 0.0 for j in range(size)] for i in range(size)
        ]
        self._weights = list(weights)
        self._windup = windup
        self._forgetting = forgetting
        self.samples = 0

    def predict(self, x: Sequence[float]) -> float:
        return dot(self.theta, x)

    def observe(self, x: Sequence[float], y: float, weight: float = 1.0) -> None:
        px = [dot(row, x) for row in self._p]
        # Forgetting inflates the uncertainty of directions traffic does not excite (a load
        # never seen); past the prior's uncertainty it would wind up and let one odd
        # observation swing the fit, so forgetting pauses there.
        # (Each coefficient's uncertainty is measured against its prior's.)
        trace = sum(self._p[i][i] * self._weights[i] for i in range(len(x)))
        forgetting = self._forgetting if trace < self._windup * len(x) else 1.0
        gain_denominator = forgetting / weight + dot(x, px)
        gain = [value / gain_denominator for value in px]
        error = y - dot(self.theta, x)
        self.theta = [t + g * error for t, g in zip(self.theta, gain, strict=True)]
        size = len(x)
        self._p = [
            [(self._p[i][j] - gain[i] * px[j]) / forgetting for j in range(size)]
            for i in range(size)
        ]
        self.samples += 1


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
