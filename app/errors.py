"""specgate's errors, and OpenAI's error body.

    SpecgateError                 any error a client sees; carries status, type, param, code
    ├── InvalidRequestError       400 invalid_request_error: the request cannot be served as sent
    │   └── ContextLengthError    400, code context_length_exceeded
    ├── PermissionDeniedError     403 invalid_request_error: an admin route, a key not admin
    ├── ModelNotFoundError        404 invalid_request_error, code model_not_found
    ├── NotFoundError             404 for unknown paths
    ├── OverloadedError           429 rate_limit_exceeded: the engine's queue is full
    ├── RateLimitError            429, code rate_limit_exceeded: over a key's rate limit
    ├── QuotaExceededError        429 insufficient_quota: a key's token budget is spent
    ├── EngineUnavailableError    503 service_unavailable: an engine is dead or shutting down
    │   └── QueueTimeoutError     503, code queue_timeout: waited too long for a slot
    └── EngineFailureError        500 server_error: the engine failed mid-request

Routes raise these; one handler (app.api.exception_handlers) turns them into responses.
"""

from __future__ import annotations

from math import ceil
from typing import Any


class SpecgateError(Exception):
    status_code = 500
    error_type = "server_error"
    default_code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.default_code
        # Seconds a client should wait before trying again (the Retry-After header).
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}

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


class PermissionDeniedError(SpecgateError):
    status_code = 403
    error_type = "invalid_request_error"
    default_code = "insufficient_permissions"


class NotFoundError(SpecgateError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "not_found"


class OverloadedError(SpecgateError):
    status_code = 429
    # OpenAI's SDKs retry a 429 on their own, honouring Retry-After.
    error_type = "rate_limit_exceeded"
    default_code = "engine_at_capacity"


class RateLimitError(SpecgateError):
    """Over one of a key's limits; `kind` is OpenAI's error type: requests or tokens."""

    status_code = 429
    default_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after: float | None, kind: str) -> None:
        super().__init__(message, retry_after=None if retry_after is None else ceil(retry_after))
        self.error_type = kind
        self.retry_after_seconds = retry_after

    def headers(self) -> dict[str, str]:
        if self.retry_after_seconds is None:  # asks for more than the limit: retrying cannot help
            return {"x-should-retry": "false"}
        # OpenAI's SDKs read retry-after-ms first: the exact wait, not a whole second more.
        milliseconds = str(max(1, ceil(self.retry_after_seconds * 1000)))
        return {**super().headers(), "retry-after-ms": milliseconds}


class QuotaExceededError(SpecgateError):
    """A key's token budget for the day or month is spent. OpenAI's SDKs would retry a 429;
    `x-should-retry: false` tells them not to, as waiting seconds will not help."""

    status_code = 429
    error_type = "insufficient_quota"
    default_code = "insufficient_quota"

    def headers(self) -> dict[str, str]:
        return {"x-should-retry": "false"}


class EngineUnavailableError(SpecgateError):
    status_code = 503
    error_type = "service_unavailable"
    default_code = "engine_unavailable"


class QueueTimeoutError(EngineUnavailableError):
    default_code = "queue_timeout"


class ShuttingDownError(EngineUnavailableError):
    """A stream still open at the end of the shutdown grace: it is cut, and says so."""

    default_code = "server_shutting_down"


class EngineFailureError(SpecgateError):
    status_code = 500
    error_type = "server_error"
    default_code = "engine_error"


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    # OpenAI's shape: `code` is a string or null, never a number.
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
