"""A deterministic stand-in for a vLLM engine, for fast tests of the HTTP layer.

It keeps the adapter's contract: token-by-token deltas, max_tokens, stop strings (trimmed
from the output, as vLLM does), n choices, logprobs with alternatives, echo, per-request
speculative figures on the speculative route, prompt validation on the first step, and
abort on early close, token ids (the prompt's on the first step, each token's on its delta).
What it says is scripted, as httpx's MockTransport scripts responses: a `Script` gives each
choice's tokens; the default repeats the prompt's words, and a finite script ends its choice
with "stop", as an end-of-sequence token would.

Like a model, it continues its own answers: a token-id prompt that is a prompt it answered plus
the first tokens of that answer (how app/switching.py moves a request to the other engine)
gets the rest of the answer, as greedy decoding on a real model would give it.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import replace

from app.engine.generation import (
    ChoiceDelta,
    FinishReason,
    GenerationRequest,
    GenerationStep,
    Prompt,
    PromptEcho,
    SamplingOptions,
    TokenLogprob,
)
from app.engine.protocol import EngineFacts, StopsOnExit
from app.engine.refusals import drafting_refusal
from app.errors import (
    ContextLengthError,
    EngineFailureError,
    EngineUnavailableError,
    InvalidRequestError,
)
from app.vocabulary import PredictionCounts, Refusal, Route, SpecDecodeStats

FAIL_MIDSTREAM = "<fail-midstream>"

# A choice's tokens, as text, for a request and a choice index.
Script = Callable[[GenerationRequest, int], Iterable[str]]

# Token ids. A token is a word (an output piece, less its leading space), and its id a stable
# hash of it: the same in both engines and in every run, as one model's tokenizer is, with
# no vocabulary to build. A token-id prompt reads as the words "t<id>" (or as the words the
# fake itself gave those ids), and "t<n>" is id n, so such a prompt keeps its ids; hashed ids
# lie above the small ids clients send. Distinct words may share a hashed id, with odds of
# about (words seen)^2 / 2^32: too rare to matter in tests.
FIRST_HASHED_ID = 1 << 20
HASHED_IDS = (1 << 31) - FIRST_HASHED_ID
_NUMBERED = re.compile(r"t(\d+)")
# Each hashed id's word, so that ids the fake gave read back as words.
_WORDS: dict[int, str] = {}


def token_id(token: str) -> int:
    """The fake's id of a token (a prompt word or an output piece)."""
    word = token.strip()
    numbered = _NUMBERED.fullmatch(word)
    if numbered is not None:
        return int(numbered.group(1))
    hashed = FIRST_HASHED_ID + zlib.crc32(word.encode()) % HASHED_IDS
    _WORDS[hashed] = word
    return hashed


END_OF_SEQUENCE = token_id("</s>")

# What the fake has answered, so that it can continue an answer (see the module docstring):
# (script, context ids) -> (the request whose answer it is, that answer's tokens already in
# the context). Keyed by the script as well, so one test's answers never continue another's.
# The oldest are forgotten past ANSWERS_KEPT: a test continues only what it just asked.
_Answer = tuple[GenerationRequest, int]
_ANSWERS: dict[tuple[Script, tuple[int, ...]], _Answer] = {}
ANSWERS_KEPT = 4096


def repeat_the_prompt(request: GenerationRequest, index: int) -> Iterator[str]:
    """The default script: the prompt's words, from the index-th on, round and round."""
    words = prompt_words(request.prompt)
    return (f" {word}" for word in itertools.islice(itertools.cycle(words), index, None))


class FakeEngine(StopsOnExit):
    def __init__(
        self,
        route: Route,
        max_model_len: int = 256,
        seconds_per_token: float = 0.0,
        per_request_draft_length: bool = False,
        script: Script = repeat_the_prompt,
        token_ids: bool = True,
    ) -> None:
        self.route: Route = route
        self.script = script
        # As an embedded speculative engine: it takes GenerationRequest.draft_length.
        self.per_request_draft_length = per_request_draft_length
        # Every request it was given, in order.
        self.requests: list[GenerationRequest] = []
        self.max_model_len = max_model_len
        # No tokenizer: its "tokens" are words, with made-up ids (see token_id). Tests of an
        # engine that gives no ids (a remote one) turn them off.
        self.token_ids = token_ids
        self.facts = EngineFacts(
            max_model_len,
            exposes_token_ids=token_ids,
            per_request_draft_length=per_request_draft_length,
        )
        self.seconds_per_token = seconds_per_token
        self.active: set[str] = set()
        # Tests set this to False to play a dead engine.
        self.alive = True

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        if not self.alive:
            raise EngineUnavailableError(f"the {self.route} engine has stopped")
        self.requests.append(request)
        words = prompt_words(request.prompt)
        options = request.options
        limit = self._answer_limit(options, len(words))
        if len(words) + limit > self.max_model_len:
            raise ContextLengthError(
                f"the request needs {len(words) + limit} tokens; the limit is {self.max_model_len}",
                param="max_tokens",
            )
        if options.temperature is not None and options.temperature < 0:
            raise InvalidRequestError("temperature must be non-negative", param="temperature")
        prompt_ids = prompt_ids_of(request.prompt, words)
        self.active.add(request.request_id)
        try:
            scripts = self._scripts(request, prompt_ids)
            # Text that may begin a stop string, held back until it is known not to (as vLLM).
            held = ["" for _ in range(options.n)]
            finished: list[FinishReason | None] = [None] * options.n
            for position in range(limit):
                await self._pace(request)
                if FAIL_MIDSTREAM in words and position == 2:
                    raise EngineFailureError("the fake engine failed mid-stream")
                deltas = []
                for index in range(options.n):
                    if finished[index]:
                        continue
                    piece = next(scripts[index], None)
                    finish: FinishReason | None
                    if piece is None:  # the script ended: an end-of-sequence token
                        text, finish = held[index], "stop"
                    else:
                        text, held[index], finish = _up_to_stop(held[index] + piece, options.stop)
                    if finish is None and position + 1 == limit:
                        text, finish = text + held[index], "length"
                    finished[index] = finish
                    token = piece or ""
                    delta = self._delta(request, index, text, token, finish, position)
                    if self.token_ids:
                        ids = (END_OF_SEQUENCE if piece is None else token_id(piece),)
                        delta = replace(delta, token_ids=ids)
                    deltas.append(delta)
                first = self.token_ids and position == 0
                yield GenerationStep(
                    prompt_tokens=len(words),
                    choices=deltas,
                    prompt_token_ids=prompt_ids if first else None,
                )
                if all(finished):
                    return
        finally:
            # Finished or closed early (an abort), the request leaves the engine.
            self.active.discard(request.request_id)

    def _scripts(
        self, request: GenerationRequest, prompt_ids: tuple[int, ...]
    ) -> list[Iterator[str]]:
        """Each choice's tokens: the script's, or the rest of an answer this prompt continues."""
        answer = _continued(self.script, prompt_ids) if request.options.n == 1 else None
        origin, said = answer or (request, 0)
        scripts = [iter(self.script(origin, index)) for index in range(request.options.n)]
        # Skip what the context already holds of the answer (checked in _continued).
        scripts[0] = itertools.islice(scripts[0], said, None)
        _ANSWERS[(self.script, prompt_ids)] = (origin, said)
        if len(_ANSWERS) > ANSWERS_KEPT:
            del _ANSWERS[next(iter(_ANSWERS))]
        return scripts

    def _delta(
        self,
        request: GenerationRequest,
        index: int,
        text: str,
        token: str,
        finish: FinishReason | None,
        position: int,
    ) -> ChoiceDelta:
        options = request.options
        logprobs = None
        if options.logprobs is not None:
            logprobs = (_token_logprob(token, position, options.logprobs),)
        echo = None
        if options.echo and position == 0:
            echo = _echo(request.prompt, options.logprobs)
        return ChoiceDelta(
            index=index,
            text=text,
            new_tokens=1,
            finish_reason=finish,
            draft_stats=self._spec(request, position + 1) if finish is not None else None,
            prediction=self._prediction(request, position + 1) if finish is not None else None,
            logprobs=logprobs,
            echo=echo,
        )

    def _prediction(self, request: GenerationRequest, tokens: int) -> PredictionCounts | None:
        if request.prediction is None:
            return None
        words = len(request.prediction.split())
        if self.route != "speculative" or request.draft_length == 0:
            return PredictionCounts(words)  # a request that never drafts lands nothing
        # Pretend the prediction's words land, up to the answer's length.
        return PredictionCounts(words, min(words, tokens))

    def _answer_limit(self, options: SamplingOptions, prompt_tokens: int) -> int:
        """The most tokens the answer may have: max_tokens, else what the context leaves."""
        left = self.max_model_len - prompt_tokens
        return options.max_tokens or min(options.default_max_tokens or left, left)

    async def _pace(self, request: GenerationRequest) -> None:
        """Wait until the engine would have the request's next token."""
        if self.seconds_per_token:
            await asyncio.sleep(self.seconds_per_token)

    def _spec(self, request: GenerationRequest, tokens: int) -> SpecDecodeStats | None:
        if self.route != "speculative":
            return None
        # Pretend every other draft token was accepted.
        return SpecDecodeStats(
            drafts=tokens,
            draft_tokens=2 * tokens,
            accepted_tokens=tokens,
            acceptance_histogram=(0, tokens, 0),  # K = 2, one landing each step
            spec_tokens=2,
        )

    def servable(self, options: SamplingOptions, draft_length: int | None = None) -> Refusal | None:
        # As vLLM: the speculative engine cannot apply some sampling fields while drafting.
        if self.route != "speculative":
            return None
        return drafting_refusal(options, draft_length=draft_length)

    def unfinished_requests(self) -> int:
        return len(self.active)

    def is_alive(self) -> bool:
        return self.alive

    async def check_health(self) -> None:
        if not self.alive:
            raise EngineUnavailableError(f"the {self.route} engine has stopped")

    async def aclose(self) -> None:
        return None


def _continued(script: Script, prompt_ids: tuple[int, ...]) -> _Answer | None:
    """The answer these ids continue: an answered context plus that answer's next tokens."""
    # The longest answered context the prompt strictly extends (a move adds at least one).
    for end in range(len(prompt_ids) - 1, 0, -1):
        answer = _ANSWERS.get((script, prompt_ids[:end]))
        if answer is None:
            continue
        origin, said = answer
        added = prompt_ids[end:]
        told = itertools.islice(script(origin, 0), said, said + len(added))
        if tuple(token_id(piece) for piece in told) == added:
            return origin, said + len(added)
    return None


def prompt_words(prompt: Prompt) -> list[str]:
    if isinstance(prompt, str):
        return prompt.split() or ["empty"]
    words: list[str] = []
    for item in prompt:
        if isinstance(item, int):
            words.append(_WORDS.get(item, f"t{item}"))
        else:
            words.extend((item["content"] or "").split())
    return words or ["empty"]


def prompt_ids_of(prompt: Prompt, words: list[str]) -> tuple[int, ...]:
    """The prompt's ids: a token-id prompt's own, otherwise its words'."""
    given = [item for item in prompt if isinstance(item, int)] if isinstance(prompt, list) else []
    if given and len(given) == len(prompt):
        return tuple(given)
    return tuple(token_id(word) for word in words)


def _up_to_stop(text: str, stop: tuple[str, ...]) -> tuple[str, str, FinishReason | None]:
    """(what can go out, what is held back, "stop" if a stop string completed)."""
    ends = [text.find(sequence) for sequence in stop]
    found = [end for end in ends if end >= 0]
    if found:
        return text[: min(found)], "", "stop"
    # The longest tail of the text that some stop string starts with.
    prefixes = (sequence[:size] for sequence in stop for size in range(1, len(sequence)))
    tail = max((len(prefix) for prefix in prefixes if text.endswith(prefix)), default=0)
    return text[: len(text) - tail], text[len(text) - tail :], None


def _token_logprob(token: str, position: int, alternatives: int) -> TokenLogprob:
    # Made-up but deterministic: the token is always the likeliest of its alternatives.
    logprob = -0.25 * (1 + position % 4)
    top = [(token, logprob), *((f" alt{k}", logprob - k) for k in range(1, alternatives))]
    return TokenLogprob(token, logprob, tuple(top[:alternatives]))


def _echo(prompt: Prompt, alternatives: int | None) -> PromptEcho:
    words = prompt_words(prompt)
    tokens = [words[0], *(f" {word}" for word in words[1:])]
    logprobs = None
    if alternatives is not None:
        # Nothing predicts the prompt's first token.
        first = TokenLogprob(tokens[0], None)
        rest = (_token_logprob(token, i, alternatives) for i, token in enumerate(tokens[1:]))
        logprobs = (first, *rest)
    return PromptEcho("".join(tokens), logprobs)
