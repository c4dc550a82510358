"""What the picker reads of a request, and of its endpoints file; `python -m app.picker`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import ValidationError

from app.picker.endpoints import load_endpoints
from app.picker.request import read_request
from app.routing.classify import WorkloadClass
from app.routing.policy import ClientChoice
from bench.servers import free_port
from tests.paths import REPO


def test_a_chat_request_is_classified_as_specgate_does() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Reply in JSON."},
            {"role": "user", "content": [{"type": "text", "text": "Invent a person."}]},
        ],
        "max_completion_tokens": 50,
        "stream": True,
        "response_format": {"type": "json_object"},
    }
    facts = read_request({}, json.dumps(body).encode())
    assert facts.workload_class == WorkloadClass.FRESH_JSON
    assert facts.max_tokens == 50 and facts.stream
    assert facts.prompt == [
        {"role": "system", "content": "Reply in JSON."},
        {"role": "user", "content": "Invent a person."},
    ]


def test_a_completion_request_and_token_ids() -> None:
    facts = read_request({}, json.dumps({"prompt": "def f(x):\n", "max_tokens": 9}).encode())
    assert facts.prompt == "def f(x):\n" and facts.max_tokens == 9
    ids = read_request({}, json.dumps({"prompt": [1, 2, 3]}).encode())
    assert ids.prompt == [1, 2, 3] and ids.workload_class is not None


def test_what_is_not_a_completion_has_no_class() -> None:
    for body in (b"", b"not json", b"[1, 2]", json.dumps({"model": "m"}).encode()):
        facts = read_request({}, body)
        assert facts.workload_class is None and facts.features is None


def test_the_clients_header_and_tenant() -> None:
    assert read_request({"x-speculative": "on;k=3"}, b"{}").choice == ClientChoice("on", 3)
    # auto leaves the choice to the picker; a value specgate refuses is for specgate to say.
    assert read_request({"x-speculative": "auto"}, b"{}").choice is None
    assert read_request({"x-speculative": "sometimes"}, b"{}").choice is None
    keyed = read_request({"authorization": "Bearer k1"}, b'{"prompt": "hi"}')
    salted = read_request({"authorization": "Bearer k1"}, b'{"prompt": "hi", "cache_salt": "s"}')
    assert keyed.tenant is not None and salted.tenant is not None
    assert keyed.tenant != salted.tenant
    assert keyed.history == f"{keyed.tenant}|{keyed.workload_class}"


def test_the_endpoints_file(tmp_path: Path) -> None:
    listed = tmp_path / "endpoints.yaml"
    listed.write_text(
        "endpoints:\n"
        "  - address: 10.0.0.1:8000\n"
        "  - {address: '[fd00::2]:8000', kind: vllm, pool: plain, max_draft: 3}\n"
    )
    first, second = load_endpoints(listed)
    assert first.kind == "specgate" and first.drafts
    assert second.pool == "plain" and not second.drafts and second.max_draft == 3
    for bad in ("host.example:8000", "10.0.0.1", "10.0.0.1:0"):
        listed.write_text(json.dumps({"endpoints": [{"address": bad}]}))
        with pytest.raises(ValidationError):
            load_endpoints(listed)
    listed.write_text(json.dumps({"endpoints": [{"address": "10.0.0.1:1"}] * 2}))
    with pytest.raises(ValueError, match="twice"):
        load_endpoints(listed)


def test_python_m_app_picker_serves_health_and_stops_on_sigterm(tmp_path: Path) -> None:
    listed = tmp_path / "endpoints.json"
    # Nothing listens there: the endpoint is down, the picker still starts and answers.
    listed.write_text(json.dumps({"endpoints": [{"address": f"127.0.0.1:{free_port()}"}]}))
    port = free_port()
    argv = [sys.executable, "-m", "app.picker", "--endpoints", str(listed), "--port", str(port)]
    process = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        status = None
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while status != health_pb2.HealthCheckResponse.SERVING and time.monotonic() < deadline:
                try:
                    request = health_pb2.HealthCheckRequest(service="readiness")
                    status = stub.Check(request, timeout=1).status
                except grpc.RpcError:
                    time.sleep(0.1)
        assert status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=15)
        assert process.returncode == 0, errors
        assert "is down" in errors
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_python_m_app_picker_refuses_a_missing_file(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "app.picker", "--endpoints", str(tmp_path / "none.yaml")]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "none.yaml" in done.stderr
