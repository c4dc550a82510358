"""Two paced specgate servers behind one Envoy listener, balanced by specgate's picker or by
Envoy's own least-request: the server bench/load_phases.py's `envoy2-*` arms run (issue 34's
changing-load comparison).

python -m bench.envoy_pool --port P --balancing {picker,least-request} [--log-dir DIR]

The upstreams are bench/picker_upstream.py with --paced: specgate whole (auto routing, one
engine that takes a draft length per request) over app/engine/fakes/paced.py's fake engine,
whose batched steps take what the real engine's measured step-cost line says
(CPU_STEP_PRIOR), with the Ray routing bench's figures (bench/ray_fake_server.py's pacing),
so that two of them fit a 2-core machine. Only the balancing differs between the arms:

- `picker`: Envoy's ext_proc filter asks specgate's picker (`python -m app.picker`, priced by
  the same CPU line: --step-cost cpu), which chooses the endpoint and the draft length
  (X-Speculative on;k=N or off); an ORIGINAL_DST cluster dials its choice;
- `least-request`: Envoy's LEAST_REQUEST over the same two; each server's own auto routing
  chooses the draft lengths.

Both through one Envoy (bench/envoy_stack.py) on port P, which also carries /health to an
upstream, so bench/servers.py's wait for /health waits for the whole stack. SIGTERM stops
Envoy, the picker and the upstreams; so does any of them exiting on its own (exit status 1).
The parts' logs and Envoy's configuration go to --log-dir (default: a fresh temporary one).
"""

from __future__ import annotations

import argparse
import logging
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.envoy_stack import (
    Listener,
    envoy,
    envoy_config,
    picker_ready,
    start_picker,
    start_upstream,
    upstream_ready,
)
from bench.servers import ServerProcess, free_port, stop_on_sigterm
from scripts.install_envoy import envoy_binary, install

logger = logging.getLogger("bench.envoy_pool")

BALANCINGS = ("picker", "least-request")
UPSTREAMS = 2
# Priced by the line the upstreams are paced by. Requests that misbehave are refused at
# info, so the picker's log says so.
PICKER_ARGS = ("--step-cost", "cpu", "--log-level", "info")
STOP_GRACE_S = 10.0
WATCH_S = 0.5


def listener(balancing: str, port: int) -> Listener:
    """The one listener: through the picker, or Envoy's own least-request balancing."""
    if balancing not in BALANCINGS:
        raise ValueError(f"balancing {balancing!r}: one of {', '.join(BALANCINGS)}")
    return Listener(balancing, port, picked=balancing == "picker")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.envoy_pool", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, required=True, help="Envoy's listener")
    parser.add_argument("--balancing", choices=BALANCINGS, required=True)
    parser.add_argument(
        "--log-dir", type=Path, default=None, help="the parts' logs (default: a temporary folder)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    folder = args.log_dir or Path(tempfile.mkdtemp(prefix="envoy-pool-"))
    folder.mkdir(parents=True, exist_ok=True)
    binary = envoy_binary()
    if not binary.exists():
        binary = install()
    parts: list[ServerProcess] = []
    try:
        for index in range(1, UPSTREAMS + 1):
            parts.append(start_upstream(folder, f"upstream-{index}", paced=True))
        for upstream in parts:
            upstream_ready(upstream)
        upstreams = [f"127.0.0.1:{upstream.port}" for upstream in parts]
        picker_port = None
        if args.balancing == "picker":
            picker = start_picker(folder, upstreams, PICKER_ARGS)
            parts.append(picker)
            picker_ready(picker)
            picker_port = picker.port
        admin = free_port()
        config = envoy_config(admin, [listener(args.balancing, args.port)], upstreams, picker_port)
        with envoy(binary, config, folder, admin) as proxy:
            logger.info(
                "%s over %s on port %d (logs: %s)",
                args.balancing,
                ", ".join(upstreams),
                args.port,
                folder,
            )
            while True:
                gone = [p.name for p in parts if p.process.poll() is not None]
                if proxy.poll() is not None:
                    gone.append("envoy")
                if gone:
                    logger.error("%s exited; stopping the rest", ", ".join(gone))
                    return 1
                time.sleep(WATCH_S)
    except KeyboardInterrupt:
        logger.info("stopping")
        return 0
    finally:
        # One stop at a time: a second SIGTERM must not cut this one short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for part in reversed(parts):
            part.stop(grace_s=STOP_GRACE_S)


if __name__ == "__main__":
    raise SystemExit(main())
