"""`python -m app [serve [MODEL]] [flags]`: read flags and SPECGATE_* variables, then serve."""

from __future__ import annotations

import gc
import logging
import math
import sys

import psutil
import uvicorn
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.api.respond import FAREWELL_SECONDS
from app.cli import parse_settings
from app.main import create_app
from app.settings import Settings

logger = logging.getLogger("specgate")


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv)
    except (SettingsError, ValidationError) as exc:
        # A bad flag or SPECGATE_* value: say which and why, without a traceback.
        print(f"specgate: invalid settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if settings.log_level != "debug":
        # httpx logs every call at INFO: with remote pools, that is every health check.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if settings.ray_replicas or settings.ray_autoscaling is not None:
        return _serve_on_ray(settings)
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            # Past the streams' own grace and their farewell, so they end first and cleanly.
            timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds + FAREWELL_SECONDS)
            + 1,
        )
    except KeyboardInterrupt:
        return 130  # a second Ctrl-C, during start-up or shutdown
    finally:
        _stop_leftover_children()
        # Collect the stopped engines now, while the modules their finalizers use still exist.
        gc.collect()
    return 0


def _stop_leftover_children() -> None:
    # The lifespan shuts the engines down; this is the net for paths that skip it (a failed
    # start-up, a forced second Ctrl-C). vLLM's engine cores must not outlive the gateway.
    # multiprocessing's resource tracker ignores SIGTERM by design and exits with us.
    children = [
        child
        for child in psutil.Process().children(recursive=True)
        if "resource_tracker" not in _command_line(child)
    ]
    for child in children:
        child.terminate()
    _, alive = psutil.wait_procs(children, timeout=10)
    for child in alive:
        logger.warning("killing engine process %s that ignored SIGTERM", child.pid)
        child.kill()


def _command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone already, or not ours to read
        return ""


def _serve_on_ray(settings: Settings) -> int:
    try:
        from app.serve_ray.deploy import serve_on_ray
    except ImportError as exc:
        print(
            f"specgate: --ray-replicas needs Ray Serve ({exc.name} is missing): "
            "pip install 'specgate[ray]'",
            file=sys.stderr,
        )
        return 2
    return serve_on_ray(settings)


if __name__ == "__main__":
    raise SystemExit(main())
