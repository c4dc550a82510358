"""Stored responses for `previous_response_id` and GET /v1/responses/{id}: in memory, LRU.

A bounded store: past `capacity` the least recently used response is dropped, and a
request that names it gets a 404. It lives in the process: a restart (or another worker
process) does not know its ids (see docs/api.md, "Responses API").
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from app.schemas.responses import ResponseObject
from app.vocabulary import ChatMessage


@dataclass(frozen=True)
class StoredResponse:
    response: ResponseObject
    # The whole conversation it ended: its input turns (history included) and its output,
    # as chat turns, ready to precede the next request's input.
    conversation: tuple[ChatMessage, ...]


class ResponseStore:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def get(self, response_id: str) -> StoredResponse | None:
        stored = self._items.get(response_id)
        if stored is not None:
            self._items.move_to_end(response_id)
        return stored

    def put(self, stored: StoredResponse) -> None:
        if self.capacity <= 0:
            return
        self._items[stored.response.id] = stored
        self._items.move_to_end(stored.response.id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
