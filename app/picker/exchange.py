"""One ext_proc stream: Envoy's messages about one HTTP request in, the picker's answers out.

The endpoint-picker protocol (gateway-api-inference-extension, proposal 004) runs the
request body in FULL_DUPLEX_STREAMED mode: Envoy sends the headers, then the body in chunks
as they arrive, and forwards nothing until the picker answers. The picker holds everything
until the body is whole (it needs the prompt to choose), then answers in the order Envoy
keeps: the headers' response, carrying `x-gateway-destination-endpoint` and the same value
in dynamic metadata under `envoy.lb`, then the body in chunks of at most 64 KiB (the size
Envoy's documentation recommends), the last marked end of stream; trailers, if any, last.

Envoy configured with a BUFFERED request body (the protocol's earlier form) sends the
headers and waits for their answer before the body: the picker lets the headers through and
puts the destination in the body's answer, which Envoy applies before the headers go on.
With no body sent at all, it chooses from the headers alone.

Kept free of gRPC's own types: `Exchange.on` takes one message and returns the answers, so
the stream handler (app/picker/server.py) only relays.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from envoy.config.core.v3.base_pb2 import HeaderValue, HeaderValueOption
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3.external_processor_pb2 import (
    BodyMutation,
    BodyResponse,
    CommonResponse,
    HeaderMutation,
    HeadersResponse,
    ImmediateResponse,
    ProcessingRequest,
    ProcessingResponse,
    StreamedBodyResponse,
    TrailersResponse,
)
from envoy.type.v3.http_status_pb2 import HttpStatus
from google.protobuf.struct_pb2 import Struct

from app.picker.choose import Pick, Refusal
from app.picker.picker import Picker
from app.picker.request import SPECULATIVE_HEADER, read_request
from app.picker.settings import (
    DESTINATION_HEADER,
    DESTINATION_NAMESPACE,
    SERVED_KEY,
    SUBSET_KEY,
    SUBSET_NAMESPACE,
)

logger = logging.getLogger("specgate.picker")

CHUNK_BYTES = 64 * 1024
# A body past this is refused (413) rather than held: a prompt is never this large.
MAX_BODY_BYTES = 64 * 1024 * 1024
FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = (ProcessingMode.BUFFERED, ProcessingMode.BUFFERED_PARTIAL)
RETRY_AFTER_SECONDS = 1
# The error types specgate's own 429 and 503 carry (app/errors.py).
ERROR_TYPES = {429: "rate_limit_exceeded", 503: "service_unavailable"}


class Exchange:
    def __init__(self, picker: Picker) -> None:
        self.picker = picker
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.subset: frozenset[str] | None = None
        # Until Envoy says otherwise, the protocol's mode.
        self.request_mode: int = FULL_DUPLEX
        self.response_mode: int = ProcessingMode.NONE
        self.pick: Pick | None = None
        # BUFFERED: the headers were let through before the body came.
        self.headers_answered = False
        # Set once an immediate response ended the request: later messages are Envoy's
        # leftovers and get no answer.
        self.refused = False

    def on(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        if self.refused:
            return []
        if message.HasField("protocol_config"):
            self.request_mode = message.protocol_config.request_body_mode
            self.response_mode = message.protocol_config.response_body_mode
        if message.HasField("metadata_context"):
            self._read_metadata(message.metadata_context.filter_metadata)
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            return self._on_headers(message)
        if kind == "request_body":
            return self._on_body(message.request_body.body, message.request_body.end_of_stream)
        if kind == "request_trailers":
            return self._on_trailers()
        if kind == "response_headers":
            return [ProcessingResponse(response_headers=HeadersResponse())]
        if kind == "response_body":
            return self._response_body(message)
        if kind == "response_trailers":
            return [ProcessingResponse(response_trailers=TrailersResponse())]
        return []

    def _read_metadata(self, namespaces: Mapping[str, Struct]) -> None:
        hint = namespaces.get(SUBSET_NAMESPACE)
        if hint is not None and SUBSET_KEY in hint.fields:
            listed = hint.fields[SUBSET_KEY].list_value.values
            self.subset = frozenset(value.string_value for value in listed)
        served = namespaces.get(DESTINATION_NAMESPACE)
        if served is not None and SERVED_KEY in served.fields:
            logger.debug("served by %s", served.fields[SERVED_KEY].string_value)

    def _on_headers(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        for header in message.request_headers.headers.headers:
            value = (
                header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
            )
            self.headers[header.key.lower()] = value
        if message.request_headers.end_of_stream or self.request_mode == ProcessingMode.NONE:
            return self._decide(body_follows=False)
        if self.request_mode in BUFFERED:
            self.headers_answered = True
            return [ProcessingResponse(request_headers=HeadersResponse())]
        if self.request_mode != FULL_DUPLEX:
            # STREAMED: Envoy waits for the headers' answer and then forwards each chunk as
            # it is answered, so the choice cannot wait for the body.
            return self._decide(body_follows=False)
        return []

    def _on_body(self, chunk: bytes, end_of_stream: bool) -> list[ProcessingResponse]:
        if self.pick is not None:  # chosen already (STREAMED): pass the chunk on
            return [ProcessingResponse(request_body=BodyResponse())]
        self.body += chunk
        if len(self.body) > MAX_BODY_BYTES:
            too_large = Refusal(413, f"request body over {MAX_BODY_BYTES} bytes", "body_too_large")
            return self._refuse(too_large)
        if not end_of_stream:
            return []
        return self._decide(body_follows=self.request_mode == FULL_DUPLEX)

    def _on_trailers(self) -> list[ProcessingResponse]:
        answers = []
        if self.pick is None:
            answers = self._decide(body_follows=True, trailers_follow=True)
            if self.refused:
                return answers
        return [*answers, ProcessingResponse(request_trailers=TrailersResponse())]

    def _decide(
        self, body_follows: bool, trailers_follow: bool = False
    ) -> list[ProcessingResponse]:
        facts = read_request(self.headers, bytes(self.body))
        outcome = self.picker.pick(facts, self.subset)
        if isinstance(outcome, Refusal):
            return self._refuse(outcome)
        self.pick = outcome
        logger.debug(
            "picked %s (%s, X-Speculative %s)",
            outcome.destination,
            outcome.workload_class,
            outcome.speculative,
        )
        common = CommonResponse(header_mutation=self._mutation(outcome))
        metadata = Struct()
        metadata.update({DESTINATION_NAMESPACE: {DESTINATION_HEADER: outcome.destination}})
        if self.headers_answered:
            # The headers went through unchanged; the body's answer carries the mutation.
            body = BodyResponse(response=common)
            return [ProcessingResponse(request_body=body, dynamic_metadata=metadata)]
        answers = [
            ProcessingResponse(
                request_headers=HeadersResponse(response=common), dynamic_metadata=metadata
            )
        ]
        if body_follows:
            answers += _streamed(bytes(self.body), end=not trailers_follow, request=True)
        return answers

    def _mutation(self, pick: Pick) -> HeaderMutation:
        # Overwrite: a client's own x-gateway-destination-endpoint must never steer Envoy.
        headers = {DESTINATION_HEADER: pick.destination}
        if pick.speculative is not None:
            headers[SPECULATIVE_HEADER] = pick.speculative
        return HeaderMutation(set_headers=[_header(key, value) for key, value in headers.items()])

    def _refuse(self, refusal: Refusal) -> list[ProcessingResponse]:
        self.refused = True
        logger.info("refused with %d: %s", refusal.status, refusal.message)
        kind = ERROR_TYPES.get(refusal.status, "invalid_request_error")
        error = {"message": refusal.message, "type": kind, "param": None, "code": refusal.code}
        body = {"error": error}
        headers = [_header("content-type", "application/json")]
        if refusal.status in (429, 503):
            headers.append(_header("retry-after", str(RETRY_AFTER_SECONDS)))
        immediate = ImmediateResponse(
            status=HttpStatus(code=refusal.status),
            headers=HeaderMutation(set_headers=headers),
            body=json.dumps(body).encode(),
            details=f"specgate_picker_{refusal.status}",
        )
        return [ProcessingResponse(immediate_response=immediate)]

    def _response_body(self, message: ProcessingRequest) -> list[ProcessingResponse]:
        part = message.response_body
        if self.response_mode == FULL_DUPLEX:  # each chunk straight back, unchanged
            return _streamed(part.body, end=part.end_of_stream, request=False)
        return [ProcessingResponse(response_body=BodyResponse())]


def _streamed(body: bytes, end: bool, request: bool) -> list[ProcessingResponse]:
    """The body back to Envoy as StreamedBodyResponse chunks, the last carrying `end`."""
    pieces = [body[i : i + CHUNK_BYTES] for i in range(0, len(body), CHUNK_BYTES)] or [b""]
    answers = []
    for index, piece in enumerate(pieces):
        streamed = StreamedBodyResponse(body=piece, end_of_stream=end and index == len(pieces) - 1)
        mutation = BodyMutation(streamed_response=streamed)
        answer = BodyResponse(response=CommonResponse(body_mutation=mutation))
        if request:
            answers.append(ProcessingResponse(request_body=answer))
        else:
            answers.append(ProcessingResponse(response_body=answer))
    return answers


def _header(key: str, value: str) -> HeaderValueOption:
    return HeaderValueOption(
        header=HeaderValue(key=key, raw_value=value.encode()),
        append_action=HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )
