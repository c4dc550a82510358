"""The picker served on loopback over a real gRPC channel, its load book filled by the test
(no scraper: each test says what every endpoint reports)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue, Metadata
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    HttpBody,
    HttpHeaders,
    ProcessingRequest,
    ProcessingResponse,
    ProtocolConfiguration,
)
from envoy.service.ext_proc.v3.external_processor_pb2_grpc import ExternalProcessorStub
from google.protobuf.struct_pb2 import Struct

from app.drafting.length_rule import GPU_STEP_PRIOR
from app.picker.endpoints import Endpoint
from app.picker.load import EndpointLoad, LoadBook
from app.picker.picker import Picker
from app.picker.server import RunningPicker, running_picker
from app.picker.settings import SUBSET_KEY, SUBSET_NAMESPACE

FIRST, SECOND, THIRD = "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"


@dataclass
class Served:
    picker: Picker
    running: RunningPicker
    channel: grpc.aio.Channel

    @property
    def stub(self) -> ExternalProcessorStub:
        return ExternalProcessorStub(self.channel)

    async def process(self, messages: Sequence[ProcessingRequest]) -> list[ProcessingResponse]:
        """Send every message, half-close, and read every answer until the picker ends."""
        call = self.stub.Process()
        for message in messages:
            await call.write(message)
        await call.done_writing()
        return [answer async for answer in call]


ServeFactory = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve() -> AsyncIterator[ServeFactory]:
    async with AsyncExitStack() as stack:

        async def factory(
            loads: Mapping[str, EndpointLoad | None],
            endpoints: Sequence[Endpoint] | None = None,
            **options: int,
        ) -> Served:
            endpoints = endpoints or [Endpoint(address=address) for address in loads]
            book = LoadBook(endpoint.address for endpoint in endpoints)
            for address, load in loads.items():
                if load is not None:
                    book.record(address, load, scrape_began=0.0)
            picker = Picker(endpoints, book, GPU_STEP_PRIOR, **options)  # type: ignore[arg-type]
            running = await stack.enter_async_context(running_picker(picker, "127.0.0.1", 0))
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
            stack.push_async_callback(channel.close)
            return Served(picker, running, channel)

        yield factory


def headers(
    fields: Mapping[str, str],
    end_of_stream: bool = False,
    subset: Sequence[str] | None = None,
    mode: int = ProcessingMode.FULL_DUPLEX_STREAMED,
) -> ProcessingRequest:
    """The first message, as Envoy sends it: headers, the protocol's modes, the subset hint."""
    values = [HeaderValue(key=k, raw_value=v.encode()) for k, v in fields.items()]
    message = ProcessingRequest(
        request_headers=HttpHeaders(headers=HeaderMap(headers=values), end_of_stream=end_of_stream),
        protocol_config=ProtocolConfiguration(request_body_mode=mode),
    )
    if subset is not None:
        hint = Struct()
        hint.update({SUBSET_KEY: list(subset)})
        message.metadata_context.CopyFrom(Metadata(filter_metadata={SUBSET_NAMESPACE: hint}))
    return message


def body(chunk: bytes, end_of_stream: bool) -> ProcessingRequest:
    return ProcessingRequest(request_body=HttpBody(body=chunk, end_of_stream=end_of_stream))


def chunked(data: bytes, size: int) -> list[ProcessingRequest]:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return [body(piece, i == len(pieces) - 1) for i, piece in enumerate(pieces)]


REQUEST_HEADERS = {
    ":method": "POST",
    ":path": "/v1/chat/completions",
    "content-type": "application/json",
}
