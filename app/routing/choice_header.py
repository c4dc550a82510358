"""The X-Speculative header's grammar: a client's choice of route and draft length.

Read here, apart from any HTTP layer, so that the gateway's handlers and the endpoint picker
(app/picker/) read it alike; each answers a malformed value its own way (the gateway with a
400, app/api/speculative_header.py; the picker by ignoring it).
"""

from __future__ import annotations

from app.routing.policy import ClientChoice

HEADER = "X-Speculative"
# What read_choice accepts (it ignores case and spaces), for the OpenAPI document.
HEADER_PATTERN = r"^\s*([Oo][Nn]|[Oo][Ff][Ff]|[Aa][Uu][Tt][Oo])\s*(;\s*[Kk]\s*=\s*[0-9]+\s*)?$"


class MalformedChoice(ValueError):
    """A header value outside the grammar; the message says what is allowed."""


def read_choice(header_value: str | None) -> ClientChoice:
    """`on`, `off` or `auto`, where `on` and `auto` may add `;k=N` (N >= 1 draft tokens)."""
    value = (header_value or "auto").strip().lower()
    head, _, parameter = value.partition(";")
    head, parameter = head.strip(), parameter.strip()
    if head not in ("on", "off", "auto"):
        raise MalformedChoice(
            f"{HEADER} must be one of on, off, auto (on and auto may add ;k=N); "
            f"got {header_value!r}"
        )
    if not parameter:
        return ClientChoice(head)  # type: ignore[arg-type]
    name, _, number = parameter.partition("=")
    number = number.strip()
    # ASCII digits only: str.isdigit() also admits "²", which int() then refuses.
    if head == "off" or name.strip() != "k" or not (number.isascii() and number.isdigit()):
        raise MalformedChoice(
            f"{HEADER}: only on and auto take a draft length, as on;k=N with N a whole "
            f"number of at least 1; got {header_value!r}"
        )
    length = int(number)
    if length < 1:
        raise MalformedChoice(
            f"{HEADER}: k must be at least 1 (send off for no drafting); got {header_value!r}"
        )
    return ClientChoice(head, length)  # type: ignore[arg-type]
