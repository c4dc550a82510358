"""Engine token logprobs -> OpenAI's two logprobs shapes (chat, and legacy completions)."""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.types import PromptEcho, TokenLogprob
from app.schemas.chat import ChatLogprobs, TokenLogprobOut, TopLogprob
from app.schemas.completions import CompletionLogprobs

# What OpenAI reports for a token with no usable log probability.
UNLIKELY = -9999.0


def chat_logprobs(entries: Sequence[TokenLogprob] | None) -> ChatLogprobs | None:
    if entries is None:
        return None
    return ChatLogprobs(
        content=[
            TokenLogprobOut(
                token=entry.token,
                logprob=UNLIKELY if entry.logprob is None else entry.logprob,
                bytes=list(entry.token.encode()),
                top_logprobs=[
                    TopLogprob(token=token, logprob=logprob, bytes=list(token.encode()))
                    for token, logprob in entry.top
                ],
            )
            for entry in entries
        ]
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
    """A completions choice's text and token logprobs: the echoed prompt's first, if any."""
    if echo is None:
        return text, list(logprobs or ())
    return echo.text + text, [*(echo.logprobs or ()), *(logprobs or ())]
