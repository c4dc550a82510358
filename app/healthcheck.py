"""`python -m app.healthcheck`: exit 0 when the local specgate answers /health with 200.

The container images' HEALTHCHECK runs it; it needs no curl, which base images may lack. It
reads SPECGATE_HOST and SPECGATE_PORT as the server does, so in a container set the port with
SPECGATE_PORT, not --port, or the probe looks in the wrong place.
"""

from __future__ import annotations

import sys
import urllib.request

from pydantic_settings import CliApp

from app.settings import Settings

TIMEOUT_SECONDS = 5.0
# A server bound to every interface is reached through loopback.
WILDCARD_HOSTS = {"", "0.0.0.0", "::"}


def health_url(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in WILDCARD_HOSTS else settings.host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}/health"


def main() -> int:
    url = health_url(CliApp.run(Settings, cli_args=[]))
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
            status = response.status
    except OSError as exc:  # refused, timed out, or an HTTP error status such as 503
        print(f"specgate unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    return 0 if status == 200 else 1


if __name__ == "__main__":
    raise SystemExit(main())
