"""Validate bodies against OpenAI's own OpenAPI document, vendored in tests/data (its source,
licence and checksum: tests/data/README.md)."""

from __future__ import annotations

import copy
import functools
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

REPO = Path(__file__).resolve().parents[1]
VENDORED = REPO / "tests" / "data" / "openai-openapi.json.gz"
VENDORED_SHA256 = "bbfd19abcde0e7412da99378deb2a959ccdd3a812f97c9e35901921e8e973f9a"
URI = "urn:openai-openapi"


def _without_nullable(node: Any) -> Any:
    # The document mixes OpenAPI 3.0's `nullable: true` into 3.1 schemas; JSON Schema
    # ignores the keyword, so spell it as "or null".
    if isinstance(node, list):
        return [_without_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _without_nullable(value) for key, value in node.items()}
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


def _document() -> bytes:
    """The vendored document, checked against its recorded checksum ($OPENAI_SPEC: a copy
    of one's own instead)."""
    override = os.environ.get("OPENAI_SPEC")
    if override:
        return Path(override).read_bytes()
    raw = gzip.decompress(VENDORED.read_bytes())
    digest = hashlib.sha256(raw).hexdigest()
    if digest != VENDORED_SHA256:
        raise AssertionError(f"{VENDORED} changed: sha256 {digest}, recorded {VENDORED_SHA256}")
    return raw


@functools.cache
def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = _without_nullable(json.loads(_document()))
    # The completions stream reuses CreateCompletionResponse, whose finish_reason and usage
    # are not nullable. Chunks before the last carry null in both, as OpenAI's own stream
    # does (and as the chat stream's schema allows): the only two fields relaxed here.
    stream = copy.deepcopy(spec["components"]["schemas"]["CreateCompletionResponse"])
    choice = stream["properties"]["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    stream["properties"]["usage"] = {"anyOf": [stream["properties"]["usage"], {"type": "null"}]}
    spec["components"]["schemas"]["specgate.CompletionStreamChunk"] = stream
    return spec


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(URI, DRAFT202012.create_resource(_spec()))
    return Draft202012Validator({"$ref": f"{URI}#/components/schemas/{name}"}, registry=registry)


def violations(body: Any, schema: str) -> list[str]:
    """Every way `body` breaks OpenAI's `schema`, as readable lines (empty: it conforms)."""
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in _validator(schema).iter_errors(body)
    ]


# The schema of each body specgate sends.
CHAT = "CreateChatCompletionResponse"
CHAT_CHUNK = "CreateChatCompletionStreamResponse"
COMPLETION = "CreateCompletionResponse"
COMPLETION_CHUNK = "specgate.CompletionStreamChunk"
MODELS = "ListModelsResponse"
MODEL_OBJECT = "Model"
ERROR = "ErrorResponse"
