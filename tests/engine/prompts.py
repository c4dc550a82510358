"""Prompts shared by the real-engine tests."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from app.embedded_model import MODEL_NAME
from bench.prompt_set import CODE, JSON_CONTINUATION

MODEL = MODEL_NAME
# CODE, and JSON_CONTINUATION: a continuation that copies its prompt, what prompt-lookup
# drafting is good at.
__all__ = ["CODE", "JSON_CONTINUATION", "MODEL", "greedy_completion"]


def greedy_completion(client: OpenAI, header: str, prompt: str = JSON_CONTINUATION) -> Any:
    """48 greedy tokens of a completion, with X-Speculative set to `header`."""
    return client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=48,
        temperature=0,
        extra_headers={"X-Speculative": header},
    )
