"""What vLLM's ngram (prompt-lookup) speculative decoding would have done for a request.

The draft replay ("shadow drafting" in responses and metrics) runs a request's token ids
through the speculative engine's draft and verify loop, so the gateway learns each request's
acceptance (and tokens per step) even when a plain engine served it: the routing policy needs
that to judge the route it did not take.
"""

# Sampled text: for an ngram draft (one token, no draft distribution) vLLM's rejection sampler
# accepts draft token t with probability p(t), exactly the chance that plain sampling picks t,
# and on rejection it samples from p without t. So the plain engine's output is a sample of
# the same process, and comparing drafts with its tokens is an unbiased estimate of the
# speculative engine's acceptance, at any temperature.
#
# How vLLM 0.32 shortens drafts near the end of a request, mirrored in `DraftReplay._draft`
# (L: the context length, prompt plus output, when the draft is made; M: max_model_len):
# - v1/spec_decode/ngram_proposer.py: at most min(k, M - L) tokens, and no more than follow
#   the matched n-gram (`propose`).
# - v1/core/sched/scheduler.py, schedule(): a running request gets at most M - L new input
#   tokens (num_computed_tokens + num_new_tokens <= M - 1, keeping a slot for the sampled
#   token), so the draft is cut to M - L - 1 tokens; update_from_output counts only the
#   scheduled draft tokens.
# - v1/worker/gpu_model_runner.py (the CPU runner inherits it), sample_tokens(): the drafter
#   runs only if `_input_fits_in_drafter`, i.e. the step's max_seq_len (computed plus
#   scheduled tokens, drafts included) plus k is at most M. Otherwise the runner hands the
#   scheduler k zeros as every request's draft (take_draft_token_ids; ngram runs with
#   synchronous scheduling, vllm/config/vllm.py), and those zeros are scheduled, verified and
#   counted like any draft. max_seq_len is over the whole batch: the simulation assumes this
#   request is the longest in it (alone, say); with a longer neighbour vLLM switches earlier.
# - Nothing shortens a draft near max_tokens (or before a stop token): the scheduler
#   schedules the whole draft and counts the rejection sampler's accepted tokens before
#   check_stop trims the output. The simulation cannot see past the output's end, so a last
#   step whose draft runs past it counts only the drafts the known tokens confirm (a lower
#   bound on vLLM's count).

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.vocabulary import SpecDecodeStats


@dataclass(frozen=True)
class NgramConfig:
    """vLLM's ngram settings: num_speculative_tokens, prompt_lookup_min/max, max_model_len."""

    k: int
    min_n: int
    max_n: int
    max_model_len: int

    def __post_init__(self) -> None:
        # vLLM checks min_n <= max_n; an n-gram of length 0 would match anywhere.
        if self.k < 1 or not 1 <= self.min_n <= self.max_n or self.max_model_len < 1:
            raise ValueError(f"invalid ngram config: {self}")


def propose(context: Sequence[int], config: NgramConfig) -> list[int]:
    """The tokens vLLM's ngram proposer drafts after `context` (its reference, O(n * max_n)).

    The longest suffix n-gram, n in [min_n, max_n], that also occurs earlier (ending before
    the last token; overlaps allowed); of its occurrences the earliest; then the up to k
    tokens that follow it, no further than the context's end or max_model_len. Mirrors
    `_find_longest_matched_ngram_and_propose_tokens` in vllm/v1/spec_decode/ngram_proposer.py.
    """
    tokens = list(context)
    total = len(tokens)
    if total < config.min_n:
        return []
    k = min(config.k, config.max_model_len - total)
    if k <= 0:
        return []
    # An earlier occurrence of an n-gram needs at least n + 1 tokens.
    for n in range(min(config.max_n, total - 1), config.min_n - 1, -1):
        suffix = tokens[total - n :]
        for start in range(total - n):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


@dataclass(frozen=True)
class ReplayFigures:
    """What a finished replay found: drafting's figures for the request, had it drafted."""

    steps: int
    stats: SpecDecodeStats
    # Tokens per decode step over every step (1.0 with none): what drafting would have given.
    tokens_per_step: float


class DraftReplay:
    """Simulates one request's ngram speculation from its prompt and output token ids.

    The engine's process: prefill emits the first output token with no draft. Each later
    (decode) step drafts from the context so far, accepts the draft's longest prefix that
    matches the actual next tokens, and emits those plus one sampled token. `steps` counts the
    decode steps; like vLLM's per-request histogram, `stats.drafts` counts only the steps whose
    draft proposed tokens.
    """

    def __init__(self, prompt_ids: Sequence[int], config: NgramConfig) -> None:
        self._config = config
        self._tokens: list[int] = []  # prompt, then every output token fed so far
        self._prompt_len = len(prompt_ids)
        # Per n, each n-gram of the known tokens -> the start of its earliest occurrence. A
        # proposal looks up the context's suffixes here instead of scanning the context.
        # Indexing tokens past the simulated context is harmless: the suffix's own
        # occurrence starts no later than any of those, and it is what marks "no earlier".
        self._first_start: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(config.min_n, config.max_n + 1)
        }
        self._append(prompt_ids)
        self._position = 0  # output tokens the simulated engine has emitted
        # The last step's sequence length (computed plus scheduled tokens): vLLM drafts for
        # the next step only if it plus k fits in max_model_len (see the module docstring).
        self._seq_len = self._prompt_len
        self._pending: tuple[int, list[int]] | None = None  # a waiting step's (position, draft)
        self._finished = False
        self._drafts = 0
        self._draft_tokens = 0
        self._accepted = 0
        # Tokens emitted after each decode step, cumulative (index 0: none), so any recent
        # window's tokens per step is one subtraction.
        self._emitted: list[int] = [0]

    @property
    def position(self) -> int:
        """Output tokens the simulation has consumed; the next step drafts after them."""
        return self._position

    @property
    def steps(self) -> int:
        """Simulated decode steps (prefill, which emits the first token, not included)."""
        return len(self._emitted) - 1

    @property
    def stats(self) -> SpecDecodeStats:
        return SpecDecodeStats(self._drafts, self._draft_tokens, self._accepted)

    def figures(self) -> ReplayFigures:
        return ReplayFigures(
            self.steps, self.stats, self.recent_tokens_per_step(self.steps or 1) or 1.0
        )

    def recent_tokens_per_step(self, window_steps: int) -> float | None:
        """Tokens emitted per step over the last `window_steps` steps (fewer if fewer ran).

        A plain engine emits 1; this is what drafting would give the request now. None before
        the first decode step.
        """
        if window_steps < 1:
            raise ValueError("window_steps must be at least 1")
        window = min(window_steps, self.steps)
        if window == 0:
            return None
        return (self._emitted[-1] - self._emitted[-1 - window]) / window

    def feed(self, token_ids: Sequence[int]) -> None:
        """Append newly generated output tokens and simulate every step they settle."""
        if self._finished:
            raise ValueError("feed after finish")
        self._append(token_ids)
        self._advance()

    def finish(self) -> None:
        """The output is complete: settle the remaining steps against the known tokens.

        Finishing again changes nothing."""
        if not self._finished:
            self._finished = True
            self._advance()

    def proposal(self) -> list[int]:
        """`propose` for the simulated context now (prompt plus `position` output tokens)."""
        return self._propose(self._prompt_len + self._position)

    def _append(self, token_ids: Sequence[int]) -> None:
        tokens = self._tokens
        for token in token_ids:
            tokens.append(token)
            end = len(tokens)
            for n, first_start in self._first_start.items():
                if end >= n:
                    first_start.setdefault(tuple(tokens[end - n :]), end - n)

    def _propose(self, length: int) -> list[int]:
        """`propose(self._tokens[:length])` from the index: O((max_n - min_n + 1) * max_n + k)."""
        config = self._config
        if length < config.min_n:
            return []
        k = min(config.k, config.max_model_len - length)
        if k <= 0:
            return []
        tokens = self._tokens
        for n in range(min(config.max_n, length - 1), config.min_n - 1, -1):
            start = self._first_start[n][tuple(tokens[length - n : length])]
            if start < length - n:  # an occurrence before the suffix itself
                return tokens[start + n : min(start + n + k, length)]
        return []

    def _draft(self, length: int) -> list[int]:
        """The draft vLLM would verify at context length `length` (see the module docstring)."""
        config = self._config
        if self._seq_len + config.k <= config.max_model_len:
            draft = self._propose(length)
        else:
            draft = [0] * config.k  # the model runner's zeros when the drafter would not fit
        return draft[: max(0, config.max_model_len - length - 1)]

    def _advance(self) -> None:
        tokens = self._tokens
        output_len = len(tokens) - self._prompt_len
        if self._position == 0 and output_len > 0:
            self._position = 1  # prefill's token: no draft, not a decode step
        while (remaining := output_len - self._position) > 0:
            length = self._prompt_len + self._position
            if self._pending is not None and self._pending[0] == self._position:
                draft = self._pending[1]
            else:
                draft = self._draft(length)
            accepted = 0
            limit = min(len(draft), remaining)
            while accepted < limit and draft[accepted] == tokens[length + accepted]:
                accepted += 1
            if accepted < limit or len(draft) < remaining:
                emitted = accepted + 1  # the rejection (or the bonus token) is known
            elif self._finished:
                # The output ended inside this step: vLLM may have accepted more of the draft
                # past the end, but only these are known.
                emitted = remaining
            else:
                self._pending = (self._position, draft)  # wait for the tokens it reaches
                return
            self._pending = None
            if draft:
                self._drafts += 1
                self._draft_tokens += len(draft)
                self._accepted += accepted
            self._seq_len = length + len(draft)
            self._position += emitted
            self._emitted.append(self._emitted[-1] + emitted)
