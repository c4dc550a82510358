"""The parts of tests/engine that run again with one engine serving both routes.

Collected here, these tests get this package's server (--engine-layout one). Chosen to cover
every endpoint (the Responses API and constrained tool calls included) and feature through
the OpenAI SDK, the sampling fields (min_p and logit_bias
included, which the plain route serves with draft length 0), SSE framing, both routes' greedy text,
acceptance figures, the draft replay, and mid-stream moves (on one engine, a move is a
resubmission with another draft length). Left out: admission under load, fuzzing and the
conformance matrix (CI's time), and the per-engine core split (one engine has no split).
"""

from __future__ import annotations

from tests.engine.test_conformance import (
    test_logit_bias_forces_a_token,
    test_sampling_fields_and_vllm_extensions,
    tokenizer,
)
from tests.engine.test_engines import (
    test_both_engines_return_the_same_greedy_text,
    test_route_headers_follow_x_speculative,
    test_the_draft_replay_matches_the_engines_drafting,
    test_the_speculative_engine_reports_acceptance,
)
from tests.engine.test_openai_sdk import (
    test_async_chat_stream_with_usage,
    test_async_completions,
    test_chat_prompt_tokens_match_the_chat_template,
    test_errors_reach_the_sdk_as_openai_errors,
    test_models,
    test_n_and_stop,
    test_prompt_token_ids_are_counted_exactly,
    test_sdk_parses_every_feature,
    test_seed_makes_sampling_reproducible,
    test_structured_output,
    test_sync_chat,
    test_sync_chat_stream_equals_non_stream,
    test_sync_completions_stream_equals_non_stream,
)
from tests.engine.test_responses import test_a_response_streams_and_conforms
from tests.engine.test_sse import (
    test_a_client_disconnect_aborts_the_request_in_the_engine,
    test_a_client_giving_up_on_a_non_streamed_request_aborts_it,
    test_raw_sse_framing,
)
from tests.engine.test_switching import (
    test_a_moved_greedy_answer_is_the_unmoved_one,
    test_a_moved_request_is_counted,
    test_requests_that_cannot_move_stay,
)
from tests.engine.test_tool_calls import test_a_named_call_parses_against_its_parameters

__all__ = [
    "test_a_client_disconnect_aborts_the_request_in_the_engine",
    "test_a_client_giving_up_on_a_non_streamed_request_aborts_it",
    "test_a_moved_greedy_answer_is_the_unmoved_one",
    "test_a_moved_request_is_counted",
    "test_a_named_call_parses_against_its_parameters",
    "test_a_response_streams_and_conforms",
    "test_async_chat_stream_with_usage",
    "test_async_completions",
    "test_both_engines_return_the_same_greedy_text",
    "test_chat_prompt_tokens_match_the_chat_template",
    "test_errors_reach_the_sdk_as_openai_errors",
    "test_logit_bias_forces_a_token",
    "test_models",
    "test_n_and_stop",
    "test_prompt_token_ids_are_counted_exactly",
    "test_raw_sse_framing",
    "test_requests_that_cannot_move_stay",
    "test_route_headers_follow_x_speculative",
    "test_sampling_fields_and_vllm_extensions",
    "test_sdk_parses_every_feature",
    "test_seed_makes_sampling_reproducible",
    "test_structured_output",
    "test_sync_chat",
    "test_sync_chat_stream_equals_non_stream",
    "test_sync_completions_stream_equals_non_stream",
    "test_the_draft_replay_matches_the_engines_drafting",
    "test_the_speculative_engine_reports_acceptance",
    "tokenizer",
]
