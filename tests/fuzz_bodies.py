"""Fuzzed requests for both generation endpoints, and what every answer to them must be.

Shared by tests/fast/api/test_fuzz.py (fake engines, in process) and tests/engine/test_fuzz_real.py
(the real server). `edge_attempts` puts each value of FIELD_EDGES on a valid body. `attempts`
draws requests of four kinds, mixed so that the fuzzer reaches the checks deep in the code
and not only the JSON parser:

    plausible   a body the server may well serve: every field legal or nearly so, extremes
                and odd combinations included (n x prompts, logprobs, stop, logit_bias ...)
    perturbed   a plausible body with one to three values, at any depth, replaced or removed
    random      any JSON value at all, objects with known and unknown fields included
    raw         bytes that are not a JSON body: truncated, mis-encoded, binary, NaN, ...

Each may go out under an odd content type or X-Speculative header. The property
(`check_answer`): 2xx or 4xx, never 5xx; a 4xx carries OpenAI's error body; a 2xx body or
every chunk of a 2xx stream matches OpenAI's schema, and a stream ends with `data: [DONE]`.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from app.schemas.chat import ChatCompletionRequest
from app.schemas.completions import CompletionRequest
from tests.openai_schema import (
    CHAT as CHAT_SCHEMA,
)
from tests.openai_schema import (
    CHAT_CHUNK,
    COMPLETION,
    COMPLETION_CHUNK,
    ERROR,
    violations,
)


def fuzz_settings(examples: int, **overrides: Any) -> settings:
    """Hypothesis settings both fuzz modules share: repeatable, no database, no deadline."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        **overrides,
    )


MODEL = "SmolLM2-135M-Instruct"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PATHS = (CHAT, COMPLETIONS)
# SmolLM2's vocabulary: token ids from here on are refused by the real engines.
VOCAB = 49152
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    CHAT: ChatCompletionRequest,
    COMPLETIONS: CompletionRequest,
}
RESPONSE_SCHEMAS = {CHAT: (CHAT_SCHEMA, CHAT_CHUNK), COMPLETIONS: (COMPLETION, COMPLETION_CHUNK)}

# Numbers at and beyond the limits of each field, and those no JSON parser agrees on.
EDGE_NUMBERS: tuple[Any, ...] = (
    0, -0.0, 1, -1, 2, 4, 5, 16, 17, 20, 21, 32, 33, 100, 101, -100.5, 255, 256, 257,
    VOCAB - 1, VOCAB, 8192, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**64 + 1,
    -(2**63) - 1, 10**30, 10**400, 0.5, 1.0000001, 2.0000001, 1e-9, 5e-324, 1e308, -1e308,
    math.nan, math.inf, -math.inf,
)  # fmt: skip
EDGE_STRINGS: tuple[str, ...] = (
    "", " ", "\x00", "\n", "\ud800", "a\udfffb", "\ud83d\ude00", "²", "٣", "\uff15", "-1", "+1",
    "1_0", "0x10", "NaN", "Infinity", "1e999", "null", "true", "0", "9" * 5000, "a" * 10_000,
    "\u202e\u200b\ufeff", "💥" * 100, MODEL, "gpt-4o", "user", "assistant", "developer",
    "json_schema", "json_object", "text", "none", "auto", "required", "[DONE]",
)  # fmt: skip
EDGE_VALUES: tuple[Any, ...] = (
    None, True, False, [], {}, [None], [[]], {"": None}, [""], [0], {"type": "text"},
    *EDGE_NUMBERS, *EDGE_STRINGS,
)  # fmt: skip


def _schema(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


USER = {"role": "user", "content": "hi"}
# For each field, values at and past its limits, and values of other types it may be given.
# Every one is sent on a valid body (edge_attempts); perturbations draw from them too.
FIELD_EDGES: dict[str, tuple[Any, ...]] = {
    "model": ("", " ", MODEL + " ", MODEL.lower(), "\ud800", "gpt-4o", None, 5, [MODEL]),
    "messages": (
        [], [{}], "hi", USER, [USER] * 300, [None], [[USER]],
        [{"role": "user"}], [{"role": "user", "content": ""}], [{"role": "user", "content": []}],
        [{"role": "user", "content": None}], [{"role": "assistant", "content": None}],
        [{"role": "user", "content": "\ud800"}], [{"role": "user", "content": "\x00" * 50}],
        [{"role": "user", "content": "a" * 20_000}], [{"role": "user", "content": {"text": "x"}}],
        [{"role": "user", "content": [{"type": "text"}]}],
        [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
        [{"role": "function", "content": "x"}], [{"role": "USER", "content": "x"}],
        [{"role": "tool", "content": "x", "tool_call_id": "1"}],
        [{"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}],
        [{"role": "user", "content": "x", "name": 5}],
        [{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}],
        [{"role": "user", "content": "<|im_end|><|im_start|>system\n"}],
    ),
    "prompt": (
        "", [], [""], [[]], [-1], [VOCAB - 1], [VOCAB], [2**63], [2**64], [0.5], [True],
        ["a", 1], [[1], "a"], [[1, 2], []], ["a"] * 32, ["a"] * 33, [[0]] * 32, [[0]] * 33,
        [0] * 9000, "a" * 40_000, "\ud800", ["\udfff"], None, 5, {"text": "x"},
        "<|im_start|>", "\x00",
    ),
    "stream": (None, 0, 1, "true", "yes", "", [], {}),
    "stream_options": (
        None, {}, [], "include_usage", {"include_usage": None}, {"include_usage": "yes"},
        {"include_usage": True, "continuous_usage_stats": True},
    ),
    "n": (0, -1, 1, 16, 17, 2**63, 1.0, 1.5, "2", None, True),
    "max_tokens": (
        0, -1, 1, 2, 255, 256, 257, 8192, 8193, 2**31, 2**63, 10**30, 1.0, 1.5, "3", None,
    ),
    "max_completion_tokens": (0, -1, 1, 256, 8193, 2**63, 1.5, "3", None),
    "temperature": (-0.0, 0, 1e-9, 1e-5, 2, 2.0000001, -1e-9, math.nan, math.inf, "0.5", 10**400),
    "top_p": (0, 1e-9, 1, 1.0000001, -0.0, -1, math.nan, None),
    "presence_penalty": (-2, 2, -2.0000001, 2.0000001, math.nan, -math.inf),
    "frequency_penalty": (-2, 2, 2.5, math.nan),
    "seed": (-1, 0, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, 1.5, "7"),
    "stop": (
        [], [""], "", ["a"] * 4, ["a"] * 5, ["\n"], "\ud800", [None], ["x" * 10_000], [1], 5,
        "<|im_end|>", " ", ["o", "n", "c", "e"],
    ),
    "logit_bias": (
        {}, [], {"²": 1}, {"٣": 1}, {"\uff15": 1}, {"9" * 5000: 1}, {"0" * 30: 1}, {" 5 ": 100},
        {"-1": 1}, {"+5": 1}, {"1.5": 1}, {"": 1}, {"5": 100.0001}, {"5": -101}, {"5": math.nan},
        {"5": math.inf}, {"5": "1"}, {"5": None}, {"5": True}, {str(VOCAB): 1},
        {str(VOCAB - 1): -100, "0": 100},
    ),
    "logprobs": (True, False, 0, 1, 5, 20, 21, -1, None, "true", 1.5),
    "top_logprobs": (0, 1, 20, 21, -1, None, 1.5, True),
    "echo": (True, False, None, 1, "yes"),
    "best_of": (None, 0, 1, 2, 16, 17, -1),
    "suffix": (None, "", "x", [], False),
    "response_format": (
        None, {}, "json_object", {"type": "regex"}, {"type": "text", "json_schema": {}},
        {"type": "json_object", "schema": {"type": "string"}}, {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {}}, {"type": "json_schema", "json_schema": None},
        _schema({"type": "nonsense"}), _schema({"$ref": "#/nowhere"}), _schema([]), _schema(True),
        _schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}),
        _schema({"type": "string", "minLength": 10, "maxLength": 1}),
        _schema({"type": "integer", "minimum": 5, "maximum": 1}),
        _schema({"enum": []}), _schema({"not": {}}), _schema({"type": "string", "format": "zzz"}),
        _schema({"type": "array", "minItems": 10**6}),
        _schema({"type": "object", "required": ["a"], "additionalProperties": False}),
        _schema({"anyOf": [{"$ref": "#"}]}),
    ),
    "user": (None, "", "\ud800", 5),
    "top_k": (-2, -1, 0, 1, VOCAB, VOCAB + 1, 2**31, 2**63 - 1, 2**63, 2**64, 10**30, 1.5, None),
    "min_p": (0, 1, 1.0000001, -0.0, math.nan, 1e-9),
    "repetition_penalty": (0, 1e-9, 1, 2, 2.0000001, -1, math.nan, math.inf),
    "tools": ([], None, [{"type": "function", "function": {"name": "f"}}], {}),
    "tool_choice": ("none", "auto", "required", {"type": "function"}, None, ""),
    "functions": ([], None, [{}]),
    "function_call": ("none", "auto", {"name": "f"}, None),
    "audio": (None, {}, {"voice": "x"}, False),
    "prediction": (
        None, "x", [1], {}, {"type": "content"}, {"type": "content", "content": "x"},
        {"type": "content", "content": ""}, {"type": "content", "content": []},
        {"type": "content", "content": [{"type": "text", "text": "y"}]},
        {"type": "content", "content": [{"type": "text"}]}, {"type": "text", "content": "x"},
        {"type": "content", "content": "\ud800"}, {"type": "content", "content": 5},
        {"type": "content", "content": "word " * 20_000},
    ),
    "metadata": (None, {}, {"k": "v" * 600}, [1]),
    "store": (True, "yes"),
    "service_tier": ("auto", "flex", 5),
    "unknown_field": (None, {"nested": [1, {"x": None}]}, "\ud800"),
}  # fmt: skip
FIELDS = tuple(FIELD_EDGES)

# Characters that trip text handling: NUL, newlines, quotes, lone surrogates (not valid
# Unicode), digits that str.isdigit() takes and int() does not, bidi and zero-width marks.
TROUBLE = (
    "\x00", "\n", '"', "\\", "\ud800", "\udfff", "²", "٣", "\u202e", "\u200b", "\ufeff", "💥",
)  # fmt: skip
# Text for values a client controls: all of Unicode, the characters above often. (Drawn as a
# list, since st.text() would fold TROUBLE into one uniform alphabet and rarely pick them.)
wild_text = st.lists(
    st.sampled_from(TROUBLE) | st.characters(exclude_categories=()), max_size=30
).map("".join) | st.sampled_from(EDGE_STRINGS)
# Text for plausible bodies: any Unicode but surrogates (which are not valid text).
some_text = st.text(max_size=30)
wild_numbers = st.sampled_from(EDGE_NUMBERS) | st.integers() | st.floats()
json_scalars = st.none() | st.booleans() | wild_numbers | wild_text | st.sampled_from(EDGE_VALUES)
wild_keys = st.sampled_from(FIELDS) | wild_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(wild_keys, inner, max_size=4),
    max_leaves=12,
)


@dataclass(frozen=True)
class Deep:
    """A value nested `depth` levels deep; spliced in as text, since json.dumps would recurse."""

    depth: int
    brackets: bool

    def text(self) -> str:
        if self.brackets:
            return "[" * self.depth + "]" * self.depth
        return '{"a":' * self.depth + "1" + "}" * self.depth


# Python's JSON parser gives up near 1000 levels; on each side of that, and far past it.
deep_values = st.builds(Deep, st.sampled_from([30, 500, 950, 1_100, 100_000]), st.booleans())
wild_values = st.sampled_from(EDGE_VALUES) | json_values | deep_values

JSON_CONTENT_TYPE = "application/json"
JSON_HEADERS = {"content-type": JSON_CONTENT_TYPE}
CONTENT_TYPES: tuple[str | None, ...] = (
    "", None, "application/json; charset=utf-8", "APPLICATION/JSON", "application/json;",
    "application/vnd.api+json", "application/json; charset=latin-1", "text/plain",
    "text/json", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/jsonx", ";", "*/*",
)  # fmt: skip
# (httpx refuses to send a header value with spaces at either end.)
ROUTE_HEADERS = ("on", "off", "auto", "ON", "Off", "maybe", "")

PROMPTS = (
    "Write a Python function that checks if a number is prime.",
    'Convert to JSON: name Ada, age 36.\n{"name": "Ada",',
    "Once upon a time",
    "def add(a, b):\n    return",
    "Summarize: the cat sat on the mat. The cat sat on the mat.",
)


@dataclass(frozen=True)
class Attempt:
    """One request as it goes on the wire."""

    kind: str
    path: str
    content: bytes
    headers: dict[str, str] = field(default_factory=dict)


# -- plausible bodies --------------------------------------------------------------------------


def _text_or_prompt(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(PROMPTS) | text


def _common_fields() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
        "n": st.integers(1, 16),
        "temperature": st.sampled_from([0, 2, 1e-9]) | st.floats(0, 2),
        "top_p": st.sampled_from([0, 1, 1e-9]) | st.floats(0, 1),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "stop": st.none()
        | st.text(min_size=1, max_size=8)
        | st.lists(st.text(min_size=1, max_size=8), max_size=4),
        "logit_bias": st.dictionaries(
            st.integers(0, VOCAB - 1).map(str),
            st.sampled_from([-100, 100]) | st.floats(-100, 100),
            max_size=4,
        ),
        "user": some_text,
        "top_k": st.sampled_from([-1, 0, 1, VOCAB, 2**63 - 1]) | st.integers(1, 100),
        "min_p": st.floats(0, 1),
        "repetition_penalty": st.floats(0, 2, exclude_min=True),
        "metadata": st.dictionaries(some_text, some_text, max_size=2),
        "store": st.booleans(),
        "service_tier": st.sampled_from(["auto", "default"]),
        "prediction": st.fixed_dictionaries(
            {"type": st.just("content"), "content": st.text(min_size=1, max_size=40)}
        ),
    }


def _max_tokens() -> st.SearchStrategy[int]:
    # Mostly a handful; now and then the context's edge or far past it.
    return st.integers(1, 6) | st.sampled_from([1, 200, 255, 256, 8192, 10**6])


text_part = st.fixed_dictionaries({"type": st.just("text"), "text": some_text})
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool"])},
    optional={
        "content": st.none() | _text_or_prompt(some_text) | st.lists(text_part, max_size=3),
        "name": some_text,
    },
)
SCHEMAS: tuple[dict[str, Any], ...] = (
    {},
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "string", "maxLength": 3},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    {"enum": ["yes", "no"]},
)
json_schema_format = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=8)},
    optional={"schema": st.sampled_from(SCHEMAS), "strict": st.booleans()},
)
response_format = st.sampled_from(
    [{"type": "text"}, {"type": "json_object"}]
) | st.fixed_dictionaries({"type": st.just("json_schema"), "json_schema": json_schema_format})


def _consistent(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    # Options that need another one mostly come with it; the rest show the refusal.
    if "stream_options" in body and draw(st.integers(0, 3)) != 3:
        body["stream"] = True
    if body.get("top_logprobs") and draw(st.integers(0, 3)) != 3:
        body["logprobs"] = True
    return body


chat_fields = st.fixed_dictionaries(
    {
        "model": st.just(MODEL),
        "messages": st.lists(message, min_size=1, max_size=4),
    },
    optional={
        **_common_fields(),
        "max_tokens": _max_tokens(),
        "max_completion_tokens": _max_tokens(),
        "response_format": response_format,
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "tool_choice": st.sampled_from(["none", "auto"]),
    },
)


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    return _consistent(draw, draw(chat_fields))


token_ids = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8)
prompts = (
    _text_or_prompt(st.text(min_size=1, max_size=30))
    | st.lists(_text_or_prompt(st.text(min_size=1, max_size=10)), min_size=1, max_size=32)
    | token_ids
    | st.lists(token_ids, min_size=1, max_size=32)
)


@st.composite
def completion_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(
        st.fixed_dictionaries(
            {"model": st.just(MODEL), "prompt": prompts},
            optional={
                **_common_fields(),
                "max_tokens": _max_tokens(),
                "logprobs": st.integers(0, 20),
                "echo": st.booleans(),
            },
        )
    )
    if draw(st.booleans()):
        body["best_of"] = body.get("n", 1)  # the only best_of that is served
    return _consistent(draw, body)


PLAUSIBLE = {CHAT: chat_bodies(), COMPLETIONS: completion_bodies()}


# -- perturbations -----------------------------------------------------------------------------


def _like(value: Any) -> st.SearchStrategy[Any]:
    """A wild value, often of `value`'s own type, so that checks past the type check run."""
    if isinstance(value, str):
        return wild_text | wild_values
    if isinstance(value, int | float) and not isinstance(value, bool):
        return wild_numbers | wild_values
    return wild_values


def _perturb_once(draw: st.DrawFn, node: dict[str, Any] | list[Any]) -> None:
    # Walk down a random path of containers, then change one entry where the walk stops.
    # What goes in is a copy: EDGE_VALUES' lists and dicts must not be changed by a later walk.
    while True:
        keys: list[Any] = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        inner = [key for key in keys if isinstance(node[key], dict | list) and node[key]]
        if not inner or not draw(st.booleans()):
            break
        node = node[draw(st.sampled_from(inner))]
    # Hypothesis leans to zero choices, so the rarer branch sits at the far end.
    remove = draw(st.integers(0, 4)) == 4
    if isinstance(node, dict):
        existing = st.sampled_from(sorted(node)) if node else st.nothing()
        key = draw(existing | wild_keys)
        if remove:
            node.pop(key, None)
        else:
            node[key] = copy.deepcopy(draw(_like(node.get(key))))
    else:
        index = draw(st.integers(0, len(node)))
        if index == len(node):
            node.append(copy.deepcopy(draw(wild_values)))
        elif remove:
            del node[index]
        else:
            node[index] = copy.deepcopy(draw(_like(node[index])))


@st.composite
def perturbed(draw: st.DrawFn, path: str) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(draw(PLAUSIBLE[path]))
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            # A field at or past its limits, on top of whatever else the body holds.
            name = draw(st.sampled_from(FIELDS))
            body[name] = copy.deepcopy(draw(st.sampled_from(FIELD_EDGES[name])))
        else:
            _perturb_once(draw, body)  # anything, at any depth
    return body


random_bodies = (
    wild_values
    | st.dictionaries(wild_keys, wild_values, max_size=6)
    | st.dictionaries(st.sampled_from(FIELDS), wild_values, max_size=8).map(
        lambda body: {"model": MODEL, **body}
    )
)


# -- encoding ----------------------------------------------------------------------------------


def encode(body: Any, ensure_ascii: bool) -> bytes:
    """`body` as JSON bytes: NaN and Infinity as Python writes them, Deep values spliced in."""
    deep: dict[str, str] = {}

    def placeholders(node: Any) -> Any:
        if isinstance(node, Deep):
            key = f"@@deep-{len(deep)}@@"
            deep[key] = node.text()
            return key
        if isinstance(node, dict):
            return {key: placeholders(value) for key, value in node.items()}
        if isinstance(node, list):
            return [placeholders(item) for item in node]
        return node

    text = json.dumps(placeholders(body), ensure_ascii=ensure_ascii)
    for key, value in deep.items():
        text = text.replace(f'"{key}"', value, 1)
    # Lone surrogates cannot be UTF-8: written anyway, the body is not valid UTF-8.
    return text.encode("utf-8", "surrogatepass")


@st.composite
def raw_bytes(draw: st.DrawFn, path: str) -> bytes:
    valid = json.dumps(draw(PLAUSIBLE[path])).encode()
    return draw(
        st.sampled_from(
            [
                b"",
                b" \n\t",
                b"null",
                b"NaN",
                b"-Infinity",
                b"1e999",
                b'"\\ud800"',
                b"{",
                b"}",
                b"{}}",
                b'{"model": 1' + b"0" * 5000 + b"}",  # past Python's int digit limit
                b"\xef\xbb\xbf" + valid,  # a UTF-8 byte-order mark
                valid.decode().encode("utf-16"),
                valid + b"\x00",
                valid.replace(b'"', b"'"),
                valid.replace(b"}", b",}", 1),
            ]
        )
        | st.binary(max_size=64)
        | st.integers(0, len(valid) - 1).map(lambda cut: valid[:cut])
        | st.tuples(st.integers(0, len(valid)), st.binary(min_size=1, max_size=4)).map(
            lambda spot: valid[: spot[0]] + spot[1] + valid[spot[0] :]
        )
    )


def attempts(path: str, cheap: bool = False) -> st.SearchStrategy[Attempt]:
    """Requests to `path`. `cheap` keeps the engine work of a servable body small."""

    @st.composite
    def build(draw: st.DrawFn) -> Attempt:
        # Perturbed bodies reach the most checks; they get the larger share.
        kind = draw(st.sampled_from(["perturbed", "plausible", "perturbed", "random", "raw"]))
        if kind == "raw":
            content = draw(raw_bytes(path))
        else:
            if kind == "plausible":
                body = draw(PLAUSIBLE[path])
            elif kind == "perturbed":
                body = draw(perturbed(path))
            else:
                body = draw(random_bodies)
            if cheap:
                body = affordable(path, body)
            content = encode(body, ensure_ascii=draw(st.booleans()))
        headers: dict[str, str] = {}
        # Mostly JSON, so that most requests reach the validation behind the content check.
        content_type: str | None = JSON_CONTENT_TYPE
        if draw(st.integers(0, 7)) == 7:
            content_type = draw(st.sampled_from(CONTENT_TYPES))
        if content_type is not None:
            headers["content-type"] = content_type
        route = draw(st.none() | st.sampled_from(ROUTE_HEADERS))
        if route is not None:
            headers["x-speculative"] = route
        return Attempt(kind, path, content, headers)

    return build()


BASES: dict[str, dict[str, Any]] = {
    CHAT: {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[2]}], "max_tokens": 3},
    COMPLETIONS: {"model": MODEL, "prompt": PROMPTS[2], "max_tokens": 3},
}


# The fields whose values reach the engines, not only the gateway's validation.
ENGINE_FIELDS = (
    "messages", "prompt", "n", "max_tokens", "temperature", "top_p", "seed", "stop",
    "logit_bias", "logprobs", "top_logprobs", "echo", "response_format", "top_k", "min_p",
    "repetition_penalty", "prediction",
)  # fmt: skip


def edge_attempts(
    path: str, fields: tuple[str, ...] = FIELDS, cheap: bool = False
) -> list[Attempt]:
    """Each of FIELD_EDGES on a valid body: the cases a random draw may well miss."""
    found = []
    edges = [(name, value) for name in fields for value in FIELD_EDGES[name]]
    for position, (name, value) in enumerate(edges):
        body = {**BASES[path], name: value}
        # Every other one streamed, so that both kinds of answer meet the edges.
        if name != "stream" and (position % 2 or name == "stream_options"):
            body["stream"] = True
        if cheap:
            body = affordable(path, body)
        found.append(Attempt("edge", path, encode(body, ensure_ascii=True), JSON_HEADERS))
    return found


# What a CPU can afford per valid request on the real engines (about 13 tokens/s each).
CHEAP_TOKENS = 4
CHEAP_CHOICES = 8


def affordable(path: str, body: Any) -> Any:
    """`body` with its token budget and fan-out cut down, if the server would serve it."""
    if not isinstance(body, dict):
        return body
    try:
        request = REQUEST_MODELS[path].model_validate(body)
    except ValidationError:
        return body  # refused before any engine sees it: costs nothing
    body = dict(body)
    if isinstance(request, ChatCompletionRequest):
        prompt_count = 1
        if (request.token_limit() or math.inf) > CHEAP_TOKENS:
            body["max_completion_tokens"] = CHEAP_TOKENS  # wins over max_tokens
    elif isinstance(request, CompletionRequest):
        kept = request.prompts()[:CHEAP_CHOICES]
        body["prompt"] = kept if len(kept) > 1 else kept[0]
        prompt_count = len(kept)
        if (request.max_tokens or math.inf) > CHEAP_TOKENS:
            body["max_tokens"] = CHEAP_TOKENS
    if request.n * prompt_count > CHEAP_CHOICES:
        body["n"] = max(1, CHEAP_CHOICES // prompt_count)
        if body.get("best_of") is not None:
            body["best_of"] = body["n"]
    return body


# -- the property ------------------------------------------------------------------------------


def check_answer(attempt: Attempt, status: int, content_type: str, content: bytes) -> None:
    """What every answer to a fuzzed request must be."""
    assert status < 500, f"{status}: {content[:2000]!r}"
    if status >= 400:
        assert content_type.startswith("application/json"), content_type
        data = json.loads(content)
        assert violations(data, ERROR) == [], data
        error = data["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"], error
        assert error["param"] is None or isinstance(error["param"], str), error
        assert error["code"] is None or isinstance(error["code"], str), error
        return
    assert status == 200, f"{status}: {content[:2000]!r}"
    body_schema, chunk_schema = RESPONSE_SCHEMAS[attempt.path]
    if not content_type.startswith("text/event-stream"):
        data = json.loads(content)
        assert _violations(data, body_schema) == [], data
        return
    # Comment lines (": ping", sent on a stream that has been quiet for 15 s, as on a busy
    # machine) carry no event.
    lines = [line for line in content.decode().splitlines() if line.strip()]
    events = [line.removeprefix("data: ") for line in lines if not line.startswith(":")]
    assert events and events[-1] == "[DONE]", events[-3:]
    for event in events[:-1]:
        chunk = json.loads(event)
        # An error after the first byte is a server failure the status could not show.
        assert "error" not in chunk, chunk
        assert _violations(chunk, chunk_schema) == [], chunk


def _violations(body: Any, schema: str) -> list[str]:
    # An echoed prompt's first token has a null logprob and no alternatives, as OpenAI's
    # service sends it and its schema does not allow (README, "OpenAI compatibility"):
    # those two nulls stand in for numbers here, and the rest is checked as it is.
    body = copy.deepcopy(body)
    for choice in body.get("choices") or []:
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        if isinstance(logprobs, dict) and logprobs.get("token_logprobs", [0])[:1] == [None]:
            logprobs["token_logprobs"][0] = 0.0
            if logprobs.get("top_logprobs", [0])[:1] == [None]:
                logprobs["top_logprobs"][0] = {}
    return violations(body, schema)


@dataclass
class Tally:
    """The figures of one fuzzing run: bodies sent, by kind and by status."""

    statuses: Counter[int] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    served: Counter[str] = field(default_factory=Counter)

    def add(self, attempt: Attempt, status: int) -> None:
        self.statuses[status] += 1
        self.kinds[attempt.kind] += 1
        if status < 300:
            self.served[attempt.kind] += 1

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    def report(self, name: str, seconds: float) -> str:
        by_class = Counter(f"{status // 100}xx" for status in self.statuses.elements())
        return (
            f"\n{name}: {self.total} requests in {seconds:.1f} s; "
            f"{dict(sorted(by_class.items()))}; by status {dict(sorted(self.statuses.items()))}; "
            f"by kind {dict(self.kinds)}, served {dict(self.served)}"
        )
