"""The endpoint-picker protocol over a real gRPC channel: what Envoy sends, what it gets back."""

from __future__ import annotations

import json

import grpc
import pytest
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpTrailers,
    ProcessingRequest,
    ProcessingResponse,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from app.picker.endpoints import Endpoint
from app.picker.exchange import CHUNK_BYTES
from app.picker.load import EndpointLoad
from app.picker.server import EXT_PROC_SERVICE
from app.picker.settings import DESTINATION_HEADER, DESTINATION_NAMESPACE
from tests.fast.picker.conftest import (
    FIRST,
    REQUEST_HEADERS,
    SECOND,
    THIRD,
    ServeFactory,
    body,
    chunked,
    headers,
)

CODE_EDIT = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "Fix the bug:\ndef f(x):\n    return x +\nprint(f(1))\n"}
    ],
    "max_tokens": 64,
}


def set_headers(answer: ProcessingResponse) -> dict[str, str]:
    common = answer.request_headers.response
    return {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}


def destination_metadata(answer: ProcessingResponse) -> str:
    namespace = answer.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value
    return str(namespace.fields[DESTINATION_HEADER].string_value)


def streamed_body(answers: list[ProcessingResponse]) -> tuple[bytes, list[bool]]:
    pieces = [a.request_body.response.body_mutation.streamed_response for a in answers]
    return b"".join(p.body for p in pieces), [p.end_of_stream for p in pieces]


async def test_headers_and_a_chunked_body_in_the_destination_out_in_header_and_metadata(
    serve: ServeFactory,
) -> None:
    served = await serve({FIRST: EndpointLoad(running=12), SECOND: EndpointLoad(running=1)})
    data = json.dumps(CODE_EDIT).encode()
    answers = await served.process([headers(REQUEST_HEADERS), *chunked(data, 17)])
    first, *rest = answers
    assert first.WhichOneof("response") == "request_headers"
    mutation = set_headers(first)
    # The less loaded endpoint; the header and the metadata say the same.
    assert mutation[DESTINATION_HEADER] == SECOND == destination_metadata(first)
    # A specgate server is told whether to draft, and how far.
    assert mutation["x-speculative"].startswith("auto;k=")
    returned, ends = streamed_body(rest)
    assert returned == data
    assert ends[-1] and not any(ends[:-1])


async def test_a_large_body_comes_back_whole_in_chunks_of_at_most_64_kib(
    serve: ServeFactory,
) -> None:
    served = await serve({FIRST: EndpointLoad()})
    prompt = "Summarize the following notes.\n" + "the quick brown fox jumps. " * 12_000
    data = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 8}).encode()
    assert len(data) > 4 * CHUNK_BYTES
    answers = await served.process([headers(REQUEST_HEADERS), *chunked(data, 50_000)])
    returned, ends = streamed_body(answers[1:])
    assert returned == data
    assert len(ends) > 4 and ends[-1] and not any(ends[:-1])
    sizes = [len(a.request_body.response.body_mutation.streamed_response.body) for a in answers[1:]]
    assert max(sizes) <= CHUNK_BYTES


async def test_the_subset_hint_is_honoured_even_for_a_busier_endpoint(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad(running=20), SECOND: EndpointLoad()})
    data = json.dumps(CODE_EDIT).encode()
    answers = await served.process([headers(REQUEST_HEADERS, subset=[FIRST]), body(data, True)])
    assert set_headers(answers[0])[DESTINATION_HEADER] == FIRST


async def test_a_subset_hint_naming_no_known_endpoint_gets_503(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad()})
    data = json.dumps(CODE_EDIT).encode()
    for subset in ([THIRD], []):
        [answer] = await served.process([headers(REQUEST_HEADERS, subset=subset), body(data, True)])
        assert answer.immediate_response.status.code == 503


async def test_no_ready_endpoint_gets_503_with_an_openai_error_body(serve: ServeFactory) -> None:
    # Listed, but never scraped (or down since its last scrape).
    served = await serve({FIRST: None, SECOND: None})
    [answer] = await served.process([headers(REQUEST_HEADERS), body(b"{}", True)])
    immediate = answer.immediate_response
    assert immediate.status.code == 503
    error = json.loads(immediate.body)["error"]
    assert (error["type"], error["code"]) == ("service_unavailable", "no_ready_endpoint")
    sent = {h.header.key: h.header.raw_value.decode() for h in immediate.headers.set_headers}
    assert sent["content-type"] == "application/json"
    assert sent["retry-after"] == "1"


async def test_every_endpoint_saturated_gets_429(serve: ServeFactory) -> None:
    served = await serve(
        {FIRST: EndpointLoad(waiting=4), SECOND: EndpointLoad(running=2, waiting=5)}, queue_limit=4
    )
    [answer] = await served.process([headers(REQUEST_HEADERS), body(b"{}", True)])
    assert answer.immediate_response.status.code == 429
    error = json.loads(answer.immediate_response.body)["error"]
    assert (error["type"], error["code"]) == ("rate_limit_exceeded", "endpoints_saturated")
    # One endpoint with room takes it.
    served.picker.book.record(SECOND, EndpointLoad(running=2, waiting=3), scrape_began=1.0)
    answers = await served.process([headers(REQUEST_HEADERS), body(b"{}", True)])
    assert set_headers(answers[0])[DESTINATION_HEADER] == SECOND


async def test_a_request_without_a_body_is_answered_at_its_headers(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad()})
    get = {":method": "GET", ":path": "/v1/models"}
    [answer] = await served.process([headers(get, end_of_stream=True)])
    assert set_headers(answer)[DESTINATION_HEADER] == FIRST
    assert destination_metadata(answer) == FIRST


async def test_a_clients_own_destination_header_is_overwritten(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad()})
    spoofed = {**REQUEST_HEADERS, DESTINATION_HEADER: "10.0.0.66:8000"}
    answers = await served.process([headers(spoofed), body(b"{}", True)])
    [option] = [
        h
        for h in answers[0].request_headers.response.header_mutation.set_headers
        if h.header.key == DESTINATION_HEADER
    ]
    assert option.header.raw_value == FIRST.encode()
    assert option.append_action == option.OVERWRITE_IF_EXISTS_OR_ADD


async def test_trailers_end_the_body_and_are_answered_last(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad()})
    trailers = ProcessingRequest(request_trailers=HttpTrailers())
    answers = await served.process([headers(REQUEST_HEADERS), body(b"{}", False), trailers])
    kinds = [answer.WhichOneof("response") for answer in answers]
    assert kinds == ["request_headers", "request_body", "request_trailers"]
    returned, ends = streamed_body(answers[1:2])
    assert returned == b"{}" and ends == [False]


async def test_buffered_mode_lets_the_headers_through_and_routes_in_the_body_answer(
    serve: ServeFactory,
) -> None:
    served = await serve({FIRST: EndpointLoad()})
    call = served.stub.Process()
    await call.write(headers(REQUEST_HEADERS, mode=ProcessingMode.BUFFERED))
    # Envoy waits for this answer before it sends the body.
    continued = await call.read()
    assert continued.WhichOneof("response") == "request_headers"
    assert not continued.request_headers.response.header_mutation.set_headers
    await call.write(body(json.dumps(CODE_EDIT).encode(), True))
    routed = await call.read()
    await call.done_writing()
    mutation = routed.request_body.response.header_mutation.set_headers
    assert {h.header.key: h.header.raw_value.decode() for h in mutation}[
        DESTINATION_HEADER
    ] == FIRST
    assert destination_metadata(routed) == FIRST
    assert not routed.request_body.response.HasField("body_mutation")  # the body goes as it was


async def test_vllm_endpoints_get_no_speculative_header(serve: ServeFactory) -> None:
    endpoints = [Endpoint(address=FIRST, kind="vllm", pool="drafting")]
    served = await serve({FIRST: EndpointLoad()}, endpoints)
    answers = await served.process(
        [headers(REQUEST_HEADERS), body(json.dumps(CODE_EDIT).encode(), True)]
    )
    assert set(set_headers(answers[0])) == {DESTINATION_HEADER}


@pytest.mark.parametrize("service", ["", "liveness", "readiness", EXT_PROC_SERVICE])
async def test_health_serves_the_protocols_names(serve: ServeFactory, service: str) -> None:
    served = await serve({FIRST: EndpointLoad()})
    stub = health_pb2_grpc.HealthStub(served.channel)
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_does_not_know_other_services(serve: ServeFactory) -> None:
    served = await serve({FIRST: EndpointLoad()})
    stub = health_pb2_grpc.HealthStub(served.channel)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.Check(health_pb2.HealthCheckRequest(service="nothing"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
