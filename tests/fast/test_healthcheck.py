"""`python -m app.healthcheck`, the containers' HEALTHCHECK, against a stand-in server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from app import healthcheck
from app.settings import Settings


class StandIn(HTTPServer):
    """Answers every GET with `status` and records the paths asked for."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.status = 200
        self.paths: list[str] = []


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        self.send_response(self.server.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    httpd = StandIn()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    # The image listens on every interface; the probe must still find it on loopback.
    monkeypatch.setenv("SPECGATE_HOST", "0.0.0.0")
    monkeypatch.setenv("SPECGATE_PORT", str(httpd.server_address[1]))
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_healthy_when_health_answers_200(server: StandIn) -> None:
    assert healthcheck.main() == 0
    assert server.paths == ["/health"]


def test_unhealthy_when_an_engine_is_down(server: StandIn) -> None:
    server.status = 503
    assert healthcheck.main() == 1


def test_unhealthy_when_nothing_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as bound_not_listening:
        bound_not_listening.bind(("127.0.0.1", 0))
        monkeypatch.setenv("SPECGATE_PORT", str(bound_not_listening.getsockname()[1]))
        assert healthcheck.main() == 1


def test_a_specific_address_is_probed_as_given() -> None:
    assert healthcheck.health_url(Settings(host="10.0.0.7", port=9000)) == (
        "http://10.0.0.7:9000/health"
    )
    assert healthcheck.health_url(Settings(host="::1")) == "http://[::1]:8000/health"
