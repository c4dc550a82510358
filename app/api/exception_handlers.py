"""Every exception handler, in one place: all errors leave as OpenAI's error body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app.api.speculative_header import no_route_error
from app.errors import SpecgateError, error_body
from app.routing.policy import Unroutable
from app.schemas.common import FieldError

logger = logging.getLogger("specgate.errors")

# Union members pydantic puts in an error's location ("prompt", "str"): builtin types here,
# and model classes, which are CamelCase where fields are snake_case.
BUILTIN_TAGS = {"str", "int", "float", "bool"}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SpecgateError, _specgate_error)  # type: ignore[arg-type]
    app.add_exception_handler(Unroutable, _unroutable)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected_error)


async def _specgate_error(request: Request, exc: SpecgateError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())


async def _unroutable(request: Request, exc: Unroutable) -> JSONResponse:
    return await _specgate_error(request, no_route_error(exc.no_route))


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    param = _param_name(location)
    message = str(first.get("msg", "invalid request"))
    cause = first.get("ctx", {}).get("error")
    if first.get("type") == "json_invalid":
        message, param = "The request body is not valid JSON.", None
    elif isinstance(cause, FieldError):
        message, param = str(cause), cause.param
    elif param:
        message = f"{message} (at '{param}')"
    return JSONResponse(
        error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400
    )


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return JSONResponse(
        error_body(str(exc.detail), error_type, None, code),
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s", request.url.path)
    return JSONResponse(
        error_body("The server had an error while processing your request.", "server_error"),
        status_code=500,
    )


def _param_name(location: list[str]) -> str | None:
    # ["messages", "0", "content"] -> "messages[0].content"
    name = ""
    for part in location:
        if part.isdigit():
            name += f"[{part}]"
        elif _is_union_tag(part):
            continue  # pydantic's names for validators and union members, not fields
        else:
            name += f".{part}" if name else part
    return name or None


def _is_union_tag(part: str) -> bool:
    if part.startswith(("function-", "list[", "dict[")) or part in BUILTIN_TAGS:
        return True
    return part[:1].isupper() and part.isidentifier()
