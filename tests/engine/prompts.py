"""Prompts shared by the real-engine tests."""

from __future__ import annotations

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
