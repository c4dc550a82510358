"""specgate's HTTP layer alone: the real app over fake engines that produce tokens instantly.

`python -m bench.fake_engine_server --port P [--cpu N]`: what the relay benchmark's embedded
path measures. Everything a request passes through runs (keys, admission, routing, metrics,
wire shapes, SSE) except the engine, so the figure is the gateway's own ceiling. `--cpu`
pins the server to one core, as the aim ("tokens/s on one core") is stated.
"""

from __future__ import annotations

import argparse
import os

import uvicorn

from app.engine.fakes.scripted import FakeEngine
from app.main import create_app
from app.settings import Settings

MAX_MODEL_LEN = 65536


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, help="pin the server to this core")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    engines = {
        "speculative": FakeEngine("speculative", max_model_len=MAX_MODEL_LEN),
        "plain": FakeEngine("plain", max_model_len=MAX_MODEL_LEN),
    }
    settings = Settings(max_running_requests=1024, max_queued_requests=1024)
    uvicorn.run(
        create_app(settings, engines),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
