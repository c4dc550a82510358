"""What an endpoint asks of the gateway, in one value: the gateway decides, admits and starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.engine.generation import Prompt, SamplingOptions
from app.request_run import Endpoint
from app.routing.policy import ClientChoice
from app.tenants.access import Access
from app.vocabulary import ChatMessage


@dataclass(frozen=True)
class RequestSpec:
    endpoint: Endpoint
    model: str
    prompts: list[Prompt]
    options: SamplingOptions
    # The text the router classifies (token-id prompts have none: they route on sampling).
    routing_text: str
    # What the client asked with X-Speculative, and X-Specgate-Move-After.
    choice: ClientChoice = field(default_factory=ClientChoice)
    move_after: int | None = None
    # The request field that sets max_tokens, for errors (max_completion_tokens, ...).
    max_tokens_field: str = "max_tokens"
    # A chat request's function tools, in OpenAI's shape, for the chat template.
    tools: tuple[dict[str, Any], ...] | None = None
    # Whose earlier answers suffix drafting may draw on (app/tenancy.py).
    tenant: str | None = None
    # The client's prediction of the answer (OpenAI's Predicted Outputs).
    prediction: str | None = None
    # The client's key, and the rate-limit headers its response carries (None: an open server).
    access: Access | None = None

    @classmethod
    def of_turns(
        cls,
        endpoint: Endpoint,
        model: str,
        turns: list[ChatMessage],
        options: SamplingOptions,
        choice: ClientChoice,
        move_after: int | None,
        max_tokens_field: str,
        tools: tuple[dict[str, Any], ...],
    ) -> RequestSpec:
        """A chat-shaped request (chat completions, the Responses API): one prompt of turns,
        routed on their text."""
        return cls(
            endpoint,
            model,
            [turns],
            options,
            routing_text="\n".join(turn["content"] or "" for turn in turns),
            choice=choice,
            move_after=move_after,
            max_tokens_field=max_tokens_field,
            tools=tools or None,
        )
