"""A minimal OpenAI-compatible upstream that streams as fast as it can make tokens.

`python -m bench.stream_upstream --port P [--tokens N]`: plain asyncio, no framework, so the
relay benchmark measures the gateway and not this server. It answers /health, /v1/models and
streamed /v1/chat/completions in vLLM's shape (a role chunk, one chunk per token with
continuous usage, the finishing chunk, a usage chunk, [DONE]), `max_tokens` tokens per answer
(default --tokens). Every other request gets a 404.

As a real server does, it encodes each event when its token is made, writes it on its own,
and lets the other streams run between tokens (an engine steps every request in turn), so
concurrent streams interleave instead of arriving as one burst each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator

MODEL = "relay-bench"
MAX_MODEL_LEN = 65536
PROMPT_TOKENS = 8


def chat_events(tokens: int) -> Iterator[bytes]:
    """The events of one streamed chat answer of `tokens` tokens, each encoded as it is made."""

    def event(choices: list[object], completion_tokens: int) -> bytes:
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion_tokens,
            "total_tokens": PROMPT_TOKENS + completion_tokens,
        }
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL,
            "choices": choices,
            "usage": usage,
        }
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield event([role], 0)
    for position in range(tokens):
        last = position == tokens - 1
        choice = {
            "index": 0,
            "delta": {"content": f" w{position % 10}"},
            "logprobs": None,
            "finish_reason": "length" if last else None,
        }
        yield event([choice], position + 1)
    yield event([], tokens)
    yield b"data: [DONE]\n\n"


def _response_head(status: str, content_type: str, length: int | None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{framing}\r\n\r\n".encode()


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _ = request_line.split(" ", 2)
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return method, path, body


async def _send_json(writer: asyncio.StreamWriter, status: str, payload: object) -> None:
    data = json.dumps(payload).encode()
    writer.write(_response_head(status, "application/json", len(data)) + data)
    await writer.drain()


async def _stream_chat(writer: asyncio.StreamWriter, body: bytes, default_tokens: int) -> None:
    request = json.loads(body)
    tokens = int(request.get("max_tokens") or default_tokens)
    writer.write(_response_head("200 OK", "text/event-stream", None))
    for event in chat_events(tokens):
        writer.write(_chunked(event))
        await writer.drain()
        await asyncio.sleep(0)  # the next token: every other stream's turn first
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, default_tokens: int
) -> None:
    try:
        while True:
            request = await _read_request(reader)
            if request is None:
                return
            method, path, body = request
            if path == "/health":
                await _send_json(writer, "200 OK", {})
            elif path == "/v1/models":
                card = {"id": MODEL, "object": "model", "max_model_len": MAX_MODEL_LEN}
                await _send_json(writer, "200 OK", {"object": "list", "data": [card]})
            elif method == "POST" and path == "/v1/chat/completions":
                await _stream_chat(writer, body, default_tokens)
            else:
                await _send_json(writer, "404 Not Found", {"error": {"message": path}})
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed the connection
    finally:
        writer.close()


async def serve(port: int, default_tokens: int) -> None:
    server = await asyncio.start_server(
        lambda reader, writer: _serve_connection(reader, writer, default_tokens),
        "127.0.0.1",
        port,
        backlog=1024,
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=256, help="tokens per answer (default 256)")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.tokens))


if __name__ == "__main__":
    main()
