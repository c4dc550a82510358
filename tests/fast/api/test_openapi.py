"""The published contract, openapi/openapi.json: in step with the app, and fit for generators."""

from __future__ import annotations

import re
from typing import Any

import pytest
from openapi_spec_validator import validate

from scripts.export_openapi import DOCUMENT, current_document, render

GENERATION = ["/v1/chat/completions", "/v1/completions"]
ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return current_document()


def test_the_committed_document_matches_the_app(document: dict[str, Any]) -> None:
    assert DOCUMENT.read_text() == render(document), (
        "openapi/openapi.json is stale: run `python -m scripts.export_openapi` and commit it"
    )


def test_it_is_valid_openapi(document: dict[str, Any]) -> None:
    validate(document)


def test_every_operation_is_named_and_summarised(document: dict[str, Any]) -> None:
    operations = [op for path in document["paths"].values() for op in path.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    assert "create_chat_completion" in ids and "create_completion" in ids
    assert all(op.get("summary") for op in operations)
    assert all("422" not in op["responses"] for op in operations)


@pytest.mark.parametrize("path", GENERATION)
def test_generation_documents_errors_streams_and_extensions(
    document: dict[str, Any], path: str
) -> None:
    operation = document["paths"][path]["post"]
    responses = operation["responses"]
    for status in ("400", "401", "404", "413", "415", "429", "500", "503"):
        assert responses[status]["content"]["application/json"]["schema"] == ERROR_REF
    ok = responses["200"]
    assert "text/event-stream" in ok["content"]
    assert "x-specgate-route" in ok["headers"]
    header = next(p for p in operation["parameters"] if p["name"] == "X-Speculative")
    assert header["in"] == "header"
    pattern = re.compile(header["schema"]["pattern"])
    for value in ("on", "off", "auto", "ON", " auto ", "on;k=2", "auto; k=3"):
        assert pattern.match(value), value
    for value in ("sometimes", "on;j=2", "on;k=", ""):
        assert not pattern.match(value), value
    assert operation["security"] == [{"ApiKeyAuth": []}, {}]


def test_extension_fields_are_described(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "specgate" in schemas["ChatCompletion"]["properties"]
    assert "speculative_decoding" in schemas["Usage"]["properties"]
    for field in ("top_k", "min_p", "repetition_penalty"):
        assert (
            "vLLM extension" in schemas["ChatCompletionRequest"]["properties"][field]["description"]
        )
