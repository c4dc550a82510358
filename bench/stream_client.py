"""A lean streaming client for the relay benchmark: raw asyncio, one connection per stream.

httpx parses every read through h11 in Python; at tens of thousands of events a second that
would make the client the bottleneck of both paths alike and hide the gateway's cost. This
client only de-chunks the body, counts events, times each read that carries data, and reads
the token count from the last usage chunk (both specgate and vLLM send one with
`include_usage`), so tokens are counted right however many a server packs into one event.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

# Enough of the stream's end to hold the usage chunk and [DONE].
TAIL_BYTES = 4096


@dataclass
class StreamResult:
    tokens: int
    events: int
    # Seconds between successive reads that brought new data, after the first.
    gaps: list[float] = field(default_factory=list)
    # Seconds from sending the request to the stream's end.
    seconds: float = 0.0


class StreamError(RuntimeError):
    pass


def chat_request(host: str, port: int, body: dict[str, object], headers: dict[str, str]) -> bytes:
    payload = json.dumps(body).encode()
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        f"host: {host}:{port}",
        "content-type: application/json",
        f"content-length: {len(payload)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def stream_once(host: str, port: int, request: bytes) -> StreamResult:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise StreamError(f"status {status.decode()}: {(await reader.read(2000))[:300]!r}")
        if b"transfer-encoding: chunked" not in head.lower():
            raise StreamError("the stream is not chunked")
        result = await _read_events(reader)
        result.seconds = time.perf_counter() - started
        return result
    finally:
        writer.close()


async def _read_events(reader: asyncio.StreamReader) -> StreamResult:
    result = StreamResult(tokens=0, events=0)
    body = _Dechunker()
    tail = b""
    last_read: float | None = None
    while not body.finished:
        data = await reader.read(65536)
        if not data:
            raise StreamError("the server closed the stream before its end")
        payload = body.feed(data)
        if not payload:
            continue
        now = time.perf_counter()
        if last_read is not None:
            result.gaps.append(now - last_read)
        last_read = now
        # Events end with a blank line; "\n\n" never spans a chunk boundary in practice, as
        # both servers write whole events, but the tail keeps the count right if it did.
        result.events += (tail[-1:] + payload).count(b"\n\n")
        tail = (tail + payload)[-TAIL_BYTES:]
    result.tokens = _completion_tokens(tail)
    return result


def _completion_tokens(tail: bytes) -> int:
    events = [line[5:].strip() for line in tail.split(b"\n") if line.startswith(b"data:")]
    if not events or events[-1] != b"[DONE]":
        raise StreamError(f"the stream did not end with [DONE]: {tail[-200:]!r}")
    for event in reversed(events[:-1]):
        chunk = json.loads(event)
        if chunk.get("error"):
            raise StreamError(f"error event: {chunk['error']}")
        usage = chunk.get("usage")
        if usage:
            return int(usage["completion_tokens"])
    raise StreamError("no usage chunk at the end of the stream")


class _Dechunker:
    """HTTP/1.1 chunked transfer coding, just enough of it: sizes, data, the last chunk."""

    def __init__(self) -> None:
        self._buffer = b""
        self._left = 0  # bytes of the current chunk's data still to come (+2 for its CRLF)
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while self._buffer:
            if self._left:
                take = self._buffer[: self._left]
                self._buffer = self._buffer[len(take) :]
                out += take[: max(0, self._left - 2)]  # not the chunk's closing CRLF
                self._left -= len(take)
                if self._left:
                    break
                continue
            line_end = self._buffer.find(b"\r\n")
            if line_end < 0:
                break
            size = int(self._buffer[:line_end].split(b";")[0], 16)
            self._buffer = self._buffer[line_end + 2 :]
            if size == 0:
                self.finished = True
                break
            self._left = size + 2
        return bytes(out)
