"""The admin routes of the key file's tenants: usage per key (GET /v1/usage, shaped after
OpenAI's organization usage API for completions) and reloading the key file.

Only a key marked `admin = true` may call them (on a server without keys, anyone may); a
tenant's key cannot read any usage, its own or another's.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from app.api.deps import GatewayDep
from app.api.openapi_docs import ERRORS
from app.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from app.gateway import Gateway
from app.tenants.access import STATE_NAME, Access

router = APIRouter()

BUCKETS = {"1m": 60, "1h": 3600, "1d": 86400}
# Buckets per page: OpenAI's defaults and bounds for each width.
PAGE = {"1m": (60, 1440), "1h": (24, 168), "1d": (7, 31)}


class UsageResult(BaseModel):
    object: Literal["organization.usage.completions.result"] = (
        "organization.usage.completions.result"
    )
    input_tokens: int
    output_tokens: int
    input_cached_tokens: int = 0
    input_audio_tokens: int = 0
    output_audio_tokens: int = 0
    num_model_requests: int
    project_id: None = None
    user_id: None = None
    # The key's name from the key file (None: a server without keys).
    api_key_id: str | None
    model: str
    batch: None = None
    # specgate's own: tokens drafted and accepted by speculative decoding, and 429s.
    drafted_tokens: int
    accepted_tokens: int
    rate_limited_requests: int


class UsageBucket(BaseModel):
    object: Literal["bucket"] = "bucket"
    start_time: int
    end_time: int
    results: list[UsageResult]


class UsagePage(BaseModel):
    object: Literal["page"] = "page"
    data: list[UsageBucket]
    has_more: bool
    next_page: str | None


def admin_only(request: Request, gateway: Gateway) -> None:
    access: Access | None = getattr(request.state, STATE_NAME, None)
    keys = gateway.keys
    if keys is None or not keys.ring:
        return  # an open server: open routes
    if access is None or access.key is None or not access.key.admin:
        raise PermissionDeniedError("This route needs an admin key (admin = true in the key file).")


@router.get("/v1/usage", summary="Usage per API key and model", responses=ERRORS)
async def get_usage(
    request: Request,
    gateway: GatewayDep,
    start_time: Annotated[int, Query(ge=0, description="Unix seconds, inclusive")],
    end_time: Annotated[int | None, Query(ge=0, description="Unix seconds, exclusive")] = None,
    bucket_width: Literal["1m", "1h", "1d"] = "1d",
    api_key_ids: Annotated[list[str] | None, Query(description="Key names")] = None,
    limit: Annotated[int | None, Query(ge=1, description="Buckets per page")] = None,
    page: Annotated[str | None, Query(description="next_page of the page before")] = None,
) -> UsagePage:
    """Requests and tokens per key and model, in buckets of a minute, an hour or a day."""
    admin_only(request, gateway)
    ledger = gateway.dispatcher.tenants.ledger
    if ledger is None:
        raise NotFoundError("The usage ledger is off (--no-usage-ledger).")
    width = BUCKETS[bucket_width]
    default, most = PAGE[bucket_width]
    if limit is not None and limit > most:
        raise InvalidRequestError(f"limit is at most {most} for {bucket_width}", param="limit")
    start = start_time // width * width
    if page is not None:
        if not page.isdigit() or int(page) < start:
            raise InvalidRequestError("page is not a next_page this route gave", param="page")
        start = int(page)
    end = end_time if end_time is not None else math.ceil(time.time())
    if end <= start_time:
        raise InvalidRequestError("end_time must be after start_time", param="end_time")
    count = math.ceil((end - start) / width)
    shown = min(count, limit or default)
    last = start + shown * width
    rows = ledger.usage(start, min(end, last), width)
    wanted = set(api_key_ids) if api_key_ids else None
    buckets = [
        UsageBucket(start_time=at, end_time=at + width, results=[])
        for at in range(start, last, width)
    ]
    for row in rows:
        if wanted is not None and row.key_name not in wanted:
            continue
        buckets[(row.bucket_start - start) // width].results.append(
            UsageResult(
                input_tokens=row.prompt_tokens,
                output_tokens=row.completion_tokens,
                num_model_requests=row.requests,
                api_key_id=row.key_name or None,
                model=row.model,
                drafted_tokens=row.drafted_tokens,
                accepted_tokens=row.accepted_tokens,
                rate_limited_requests=row.rate_limited,
            )
        )
    more = shown < count
    return UsagePage(data=buckets, has_more=more, next_page=str(last) if more else None)


class KeysReloaded(BaseModel):
    object: Literal["keys.reload"] = "keys.reload"
    keys: int


@router.post("/v1/keys/reload", summary="Reload the key file", responses=ERRORS)
async def reload_keys(request: Request, gateway: GatewayDep) -> KeysReloaded:
    """Read the key file again (as SIGHUP does); a bad file is refused with the line at fault
    and the keys in force are kept."""
    admin_only(request, gateway)
    keys = gateway.keys
    if keys is None or keys.path is None:
        raise InvalidRequestError("This server has no key file (--api-key-file).")
    if not keys.reload():
        raise InvalidRequestError(f"The key file was not reloaded: {keys.last_error}")
    return KeysReloaded(keys=len(keys.ring.keys))
