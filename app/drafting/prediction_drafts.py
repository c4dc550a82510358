"""Drafts from a client's prediction of the answer (OpenAI's Predicted Outputs).

A request may bring the text its answer will mostly be (an editor regenerating a file with a
small change). Its tokens are a draft source for that request alone: while the answer follows
the prediction, each step drafts the prediction's next tokens; where the answer leaves it (the
edit), the drafts stop, and they pick up again where the answer's latest tokens are found in
the prediction once more: further on after a deletion, at the same place after an insertion,
past the old text after a changed line.

State is only a hint (where in the prediction the answer stood, and at which output length):
each call checks the output against it, so a step the hint missed (a preempted request, a
draft the scheduler cut) costs a search, never a wrong draft. Nothing here imports vLLM: the
worker calls it with the request's output tokens (app/engine/vllm/worker/drafting_patches.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

# The answer's latest tokens must match this many of the prediction's to place it there
# again after a departure: fewer finds common fragments (an indent, "return") in the wrong
# place.
ANCHOR_TOKENS = 4
# A placement matched over more of the answer's latest tokens wins; beyond this many they
# add nothing.
LONGEST_ANCHOR = 32


class PredictionDrafts:
    def __init__(self, prediction: Sequence[int]) -> None:
        self.prediction = tuple(prediction)
        # Where every ANCHOR_TOKENS-gram of the prediction ends (the index after it).
        self._ends: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for end in range(ANCHOR_TOKENS, len(self.prediction) + 1):
            self._ends[self.prediction[end - ANCHOR_TOKENS : end]].append(end)
        # The hint: after `_output_length` output tokens, the answer stood just before
        # prediction[_cursor] (None: lost, or not yet placed).
        self._cursor: int | None = 0
        self._output_length = 0
        # The prediction's furthest point the answer has reached: a new placement prefers
        # what lies beyond it (answers move forward through a file).
        self._reached = 0
        # The last proposal carried on from the one before (the answer produced what the
        # prediction said), rather than a new placement found by search.
        self.followed = False

    def propose(self, output: Sequence[int], most: int) -> list[int]:
        """Up to `most` tokens the prediction says come next after `output` (the answer's
        tokens so far); empty where the answer does not stand anywhere in the prediction."""
        cursor = self._follow(output)
        self.followed = cursor is not None
        if cursor is None:
            cursor = self._place(output)
        self._cursor, self._output_length = cursor, len(output)
        if cursor is None or most <= 0:
            return []
        self._reached = max(self._reached, cursor)
        return list(self.prediction[cursor : cursor + most])

    def _follow(self, output: Sequence[int]) -> int | None:
        """The hint carried over the tokens produced since it was taken, if they match."""
        cursor, seen = self._cursor, self._output_length
        if cursor is None or seen > len(output):
            return None
        new = output[seen:]
        if tuple(new) != self.prediction[cursor : cursor + len(new)]:
            return None
        return cursor + len(new)

    def _place(self, output: Sequence[int]) -> int | None:
        """Where the answer's latest tokens end in the prediction: the candidate matched over
        the most of them, the first at or beyond the furthest point reached among equals."""
        if len(output) < ANCHOR_TOKENS:
            return None
        anchor = tuple(output[len(output) - ANCHOR_TOKENS :])
        best: tuple[int, bool, int] | None = None  # (matched, ahead, -end)
        for end in self._ends.get(anchor, ()):
            matched = self._matched_backwards(output, end)
            key = (matched, end >= self._reached, -end)
            if best is None or key > best:
                best = key
        return None if best is None else -best[2]

    def _matched_backwards(self, output: Sequence[int], end: int) -> int:
        """How many of the answer's latest tokens equal the prediction's before `end`."""
        matched = ANCHOR_TOKENS
        while (
            matched < LONGEST_ANCHOR
            and matched < end
            and matched < len(output)
            and output[len(output) - matched - 1] == self.prediction[end - matched - 1]
        ):
            matched += 1
        return matched
