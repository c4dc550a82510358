"""The X-Speculative header over HTTP: the client's choice read (app/routing/choice_header.py)
or a 400, checked against the engines, and the 400s of what no route can serve as asked.

The routing policy works on values (`ClientChoice` in, `RouteDecision` or `NoRoute` out); this
module is where they meet HTTP.
"""

from __future__ import annotations

from app.errors import InvalidRequestError
from app.routing.choice_header import HEADER, MalformedChoice, read_choice
from app.routing.policy import ClientChoice, DraftLengths, NoRoute


def parse_header(header_value: str | None) -> ClientChoice:
    """The client's choice (app/routing/choice_header.py), or a 400 naming the grammar."""
    try:
        return read_choice(header_value)
    except MalformedChoice as malformed:
        raise _invalid(str(malformed)) from None


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
