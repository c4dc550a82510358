"""The X-Speculative header: parsed into the client's choice, checked against the engines, and
the 400s of what no route can serve as asked.

The routing policy works on values (`ClientChoice` in, `RouteDecision` or `NoRoute` out); this
module is where they meet HTTP.
"""

from __future__ import annotations

from app.errors import InvalidRequestError
from app.routing.policy import ClientChoice, DraftLengths, NoRoute

HEADER = "X-Speculative"
# What parse_header accepts (it ignores case and spaces), for the OpenAPI document.
HEADER_PATTERN = r"^\s*([Oo][Nn]|[Oo][Ff][Ff]|[Aa][Uu][Tt][Oo])\s*(;\s*[Kk]\s*=\s*[0-9]+\s*)?$"


def parse_header(header_value: str | None) -> ClientChoice:
    """`on`, `off` or `auto`, where `on` and `auto` may add `;k=N` (N >= 1 draft tokens)."""
    value = (header_value or "auto").strip().lower()
    head, _, parameter = value.partition(";")
    head, parameter = head.strip(), parameter.strip()
    if head not in ("on", "off", "auto"):
        raise _invalid(
            f"{HEADER} must be one of on, off, auto (on and auto may add ;k=N); "
            f"got {header_value!r}"
        )
    if not parameter:
        return ClientChoice(head)  # type: ignore[arg-type]
    name, _, number = parameter.partition("=")
    number = number.strip()
    # ASCII digits only: str.isdigit() also admits "²", which int() then refuses.
    if head == "off" or name.strip() != "k" or not (number.isascii() and number.isdigit()):
        raise _invalid(
            f"{HEADER}: only on and auto take a draft length, as on;k=N with N a whole "
            f"number of at least 1; got {header_value!r}"
        )
    length = int(number)
    if length < 1:
        raise _invalid(
            f"{HEADER}: k must be at least 1 (send off for no drafting); got {header_value!r}"
        )
    return ClientChoice(head, length)  # type: ignore[arg-type]


def checked(choice: ClientChoice, lengths: DraftLengths) -> ClientChoice:
    """The choice, once its draft length is one the speculative route can take."""
    length = choice.draft_length
    if length is None:
        return choice
    if not lengths.per_request:
        raise InvalidRequestError(
            f"{HEADER}: a draft length (k=N) needs an embedded speculative engine; "
            "this server's speculative route cannot take one",
            param=HEADER,
            code="unsupported_draft_length",
        )
    if lengths.most is not None and length > lengths.most:
        raise _invalid(
            f"{HEADER}: k={length} is more than the engine drafts "
            f"(num_speculative_tokens {lengths.most})"
        )
    return choice


def no_route_error(no_route: NoRoute) -> InvalidRequestError:
    """The 400 for a request no route serves as asked, with the way out when there is one."""
    refusal, route = no_route.refusal, no_route.route
    advice = f"; send {HEADER}: auto" if no_route.other_serves else ""
    return InvalidRequestError(
        f"{refusal.names}: {refusal.why} on the {route} route{advice}",
        param=HEADER if no_route.other_serves else refusal.fields[0],
        code="unsupported_with_speculation" if route == "speculative" else "unsupported_on_route",
    )


def _invalid(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=HEADER, code="invalid_header")
