"""OpenAI wire models. Nothing here imports engine code."""
