"""/v1/completions encoded: the completion, its chunks, echo and legacy logprobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from app.encoders.common import closing_fields, finished_choices, id_fields, public_finish
from app.engine.generation import ChoiceDelta, PromptEcho, TokenLogprob
from app.request_run import ChoiceResult, Run
from app.schemas.completions import Completion, CompletionChoice, CompletionLogprobs


class CompletionsEncoder:
    def __init__(self, model: str, *, with_logprobs: bool) -> None:
        self.model = model
        self.with_logprobs = with_logprobs
        # Where each streamed choice's next token starts in its text, for text_offset.
        self._offsets: dict[int, int] = {}

    def response(self, run: Run) -> Completion:
        return Completion(
            **id_fields(run, self.model),
            choices=[
                self._whole_choice(index, choice, finish)
                for index, choice, finish in finished_choices(run)
            ],
            **closing_fields(run),
        )

    def chunk(self, delta: ChoiceDelta, first: bool, run: Run) -> Completion:
        text, entries = with_echo(delta.echo, delta.text, delta.logprobs)
        logprobs = None
        if self.with_logprobs:
            offset = self._offsets.get(delta.index, 0)
            logprobs = completion_logprobs(entries, offset)
            self._offsets[delta.index] = offset + sum(len(entry.token) for entry in entries)
        return Completion(
            **id_fields(run, self.model),
            choices=[
                CompletionChoice(
                    index=delta.index,
                    text=text,
                    logprobs=logprobs,
                    finish_reason=public_finish(delta.finish_reason),
                )
            ],
        )

    def usage_chunk(self, run: Run) -> Completion:
        return Completion(
            **id_fields(run, self.model),
            choices=[],
            **closing_fields(run),
        )

    def _whole_choice(
        self, index: int, choice: ChoiceResult, finish: Literal["stop", "length"]
    ) -> CompletionChoice:
        """A whole choice: the echoed prompt (if any), then the output."""
        text, entries = with_echo(choice.echo, choice.text, choice.logprobs)
        return CompletionChoice(
            index=index,
            text=text,
            logprobs=completion_logprobs(entries) if self.with_logprobs else None,
            finish_reason=finish,
        )


def completion_logprobs(
    entries: Sequence[TokenLogprob] | None, text_offset: int = 0
) -> CompletionLogprobs | None:
    """The legacy shape; `text_offset` is where the first token starts in the choice's text."""
    if entries is None:
        return None
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.token)
    return CompletionLogprobs(
        text_offset=offsets,
        token_logprobs=[entry.logprob for entry in entries],
        tokens=[entry.token for entry in entries],
        # The echoed prompt's first token has no prediction, hence no alternatives.
        top_logprobs=[None if entry.logprob is None else dict(entry.top) for entry in entries],
    )


def with_echo(
    echo: PromptEcho | None, text: str, logprobs: Sequence[TokenLogprob] | None
) -> tuple[str, list[TokenLogprob]]:
    """A choice's text and token logprobs: the echoed prompt's first, if any."""
    if echo is None:
        return text, list(logprobs or ())
    return echo.text + text, [*(echo.logprobs or ()), *(logprobs or ())]
