"""What the generated OpenAPI document says beyond the route signatures: the error bodies,
the SSE alternative, specgate's response headers, and the API-key scheme."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.schemas.common import ErrorResponse


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("Invalid request: `param` names the field at fault."),
    401: _error("Missing or wrong API key (when the server has keys)."),
    404: _error("Unknown model (code `model_not_found`)."),
    413: _error("Request body over the server's limit."),
    415: _error("Content-Type other than application/json."),
    429: _error("The engine's queue is full; retry after `Retry-After` seconds."),
    500: _error("The engine failed while generating."),
    503: _error("The engine is down, or the request waited too long in the queue."),
}

_ROUTE_HEADERS = {
    "x-specgate-route": "The engine that served the request: speculative or plain.",
    "x-specgate-class": "The workload class the request was given.",
    "x-specgate-reason": "Why that engine was chosen.",
    "x-request-id": "The response's id.",
}

# 200 is JSON, or an SSE stream of chunks ending with `data: [DONE]` when `stream` is true.
GENERATION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The completion; with `stream: true`, a `text/event-stream` of chunks "
        "(`data: {...}` lines) ending with `data: [DONE]`.",
        "headers": {
            name: {"description": text, "schema": {"type": "string"}}
            for name, text in _ROUTE_HEADERS.items()
        },
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **ERRORS,
}


def install_openapi(app: FastAPI) -> None:
    """Add the bearer-key scheme to the generated document, for client generators."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                routes=app.routes,
            )
            schema["components"]["securitySchemes"] = {
                "ApiKeyAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Needed on /v1/* when the server runs with --api-key.",
                }
            }
            for path, operations in schema["paths"].items():
                for operation in operations.values():
                    # Invalid bodies are 400s here, as at OpenAI, never FastAPI's 422.
                    operation["responses"].pop("422", None)
                    if path.startswith("/v1/"):
                        operation["security"] = [{"ApiKeyAuth": []}, {}]
            for unused in ("HTTPValidationError", "ValidationError"):
                schema["components"]["schemas"].pop(unused, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
