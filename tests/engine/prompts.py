"""Prompts shared by the real-engine tests."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

from app.embedded_model import MODEL_NAME

MODEL = MODEL_NAME
CODE = [{"role": "user", "content": "Write a Python function that checks if a number is prime."}]
# A continuation that copies its prompt: what prompt-lookup drafting is good at.
JSON_CONTINUATION = (
    "[\n"
    + "".join(
        f'  {{"id": {i}, "name": "user{i}", "email": "user{i}@example.com", "active": true}},\n'
        for i in range(1, 9)
    )
    + '  {"id": 9,'
)


def greedy_completion(client: OpenAI, header: str, prompt: str = JSON_CONTINUATION) -> Any:
    """48 greedy tokens of a completion, with X-Speculative set to `header`."""
    return client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=48,
        temperature=0,
        extra_headers={"X-Speculative": header},
    )
