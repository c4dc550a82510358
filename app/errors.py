"""specgate's errors, and OpenAI's error body.

    SpecgateError                 any error a client sees; carries status, type, param, code
    ├── InvalidRequestError       400 invalid_request_error: the request cannot be served as sent
    │   └── ContextLengthError    400, code context_length_exceeded
    ├── ModelNotFoundError        404 invalid_request_error, code model_not_found
    ├── NotFoundError             404 for unknown paths
    ├── EngineUnavailableError    503 service_unavailable: an engine is dead or shutting down
    └── EngineFailureError        500 server_error: the engine failed mid-request

Routes raise these; one handler (app.api.handlers) turns them into responses.
"""

from __future__ import annotations

from typing import Any


class SpecgateError(Exception):
    status_code = 500
    error_type = "server_error"
    default_code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.param, self.code)


class InvalidRequestError(SpecgateError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthError(InvalidRequestError):
    default_code = "context_length_exceeded"


class ModelNotFoundError(SpecgateError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "model_not_found"


class NotFoundError(SpecgateError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class EngineUnavailableError(SpecgateError):
    status_code = 503
    error_type = "service_unavailable"
    default_code = "engine_unavailable"


class EngineFailureError(SpecgateError):
    status_code = 500
    error_type = "server_error"
    default_code = "engine_error"


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    # OpenAI's shape: `code` is a string or null, never a number.
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
