"""Predicted Outputs in the two-engine layout with n-gram drafting: a request with a
prediction goes where it can draft, its greedy answer is the plain engine's, and the plain
engine lands nothing of it. (One engine with suffix drafting: tests/engine_suffix.)"""

from __future__ import annotations

from openai import OpenAI

from tests.engine.prompts import CODE, MODEL


def test_a_prediction_drafts_on_the_speculative_engine_and_lands_nothing_on_the_plain(
    sync_client: OpenAI,
) -> None:
    def ask(header: str, prediction: str | None) -> tuple[str, str, dict[str, int]]:
        extra = {"prediction": {"type": "content", "content": prediction}} if prediction else {}
        raw = sync_client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=CODE,  # type: ignore[arg-type]
            max_tokens=40,
            temperature=0,
            extra_headers={"X-Speculative": header},
            **extra,  # type: ignore[arg-type]
        )
        completion = raw.parse()
        assert completion.usage is not None
        details = completion.usage.completion_tokens_details
        counts = details.model_dump() if details else {}
        return raw.headers["x-specgate-route"], completion.choices[0].message.content or "", counts

    route, plain, _ = ask("off", None)
    assert route == "plain" and plain
    route, predicted, counts = ask("auto", plain)
    assert route == "speculative" and predicted == plain
    assert counts["accepted_prediction_tokens"] > 0
    route, unused, counts = ask("off", plain)
    assert route == "plain" and unused == plain
    assert counts["accepted_prediction_tokens"] == 0 and counts["rejected_prediction_tokens"] > 0
