"""A specgate server over one fake engine (--engine-layout one: it drafts per request), that
says who served and what it was sent: `python -m bench.picker_upstream --port P [--paced]`.

The fake answers at once (or at --seconds-per-token), so a test or bench/picker_latency.py
measures the path's own cost; with --paced it is app/engine/fakes/paced.py's PacedFakeEngine,
whose batched steps take what the real engine's measured step-cost line says, with
bench/ray_fake_server.py's pacing (the same figures as the Ray routing bench's replicas):
bench/envoy_pool.py's upstreams for the changing-load comparison through Envoy.

Each response carries `x-served-by` (this server's ip:port) and the request's
`x-gateway-destination-endpoint` and `x-speculative` as they arrived, so a test through
Envoy compares the endpoint that served with the one the picker chose, in one response.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

import uvicorn
from fastapi import Request, Response

from app.engine.fakes.paced import PacedFakeEngine
from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings

SERVED_BY = "x-served-by"
SEEN_DESTINATION = "x-seen-destination"
SEEN_SPECULATIVE = "x-seen-speculative"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds-per-token", type=float, default=0.0)
    parser.add_argument(
        "--paced",
        action="store_true",
        help="the fake engine in batched steps priced by the real engine's step-cost line",
    )
    args = parser.parse_args()
    engine = build_engine(args.paced, args.seconds_per_token)
    # Validated from a dict: mypy, without pydantic's plugin, reads every field as required.
    settings = Settings.model_validate(
        {"routing_exploration": 0, "max_running_requests": 256, "max_queued_requests": 256}
    )
    app = create_app(settings, {"speculative": engine, "plain": engine})
    address = f"127.0.0.1:{args.port}"

    @app.middleware("http")
    async def say_who(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        response.headers[SERVED_BY] = address
        for header, echo in (
            ("x-gateway-destination-endpoint", SEEN_DESTINATION),
            ("x-speculative", SEEN_SPECULATIVE),
        ):
            response.headers[echo] = request.headers.get(header, "")
        return response

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


def build_engine(paced: bool, seconds_per_token: float = 0.0) -> FakeEngine:
    """One engine for both routes: it takes a draft length per request."""
    if paced:
        if seconds_per_token:
            raise SystemExit("--paced and --seconds-per-token: the pacing sets every step's time")
        # The Ray routing bench's replicas' figures, one source for both benches. Imported
        # here: that module imports Ray Serve (seconds), which the instant fake has no use for.
        from bench.ray_fake_server import pacing

        return PacedFakeEngine(pacing(), max_model_len=1 << 17)
    return FakeEngine(
        "speculative",
        max_model_len=1 << 17,  # a large prompt goes through whole
        per_request_draft_length=True,
        seconds_per_token=seconds_per_token,
    )


if __name__ == "__main__":
    main()
