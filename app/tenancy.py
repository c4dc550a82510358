"""Whose earlier answers a request may draft from, when the engine drafts from a suffix tree of
answers (app/engine/vllm/worker/suffix_drafter.py).

A tenant is the request's `cache_salt` (vLLM's name for the field that keeps clients' cached
work apart) when it sends one, else its API key; either is hashed, so no key reaches the
engine. Requests with neither share one tree. With --suffix-tree-scope shared every request is
in that tree: a deployment that serves one client drafts from all its answers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from app.tenants.access import Access

TreeScope = Literal["tenant", "shared"]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Tenancy:
    """What the server and the request's headers say of its tenant, before its body is read."""

    scope: TreeScope = "tenant"
    authorization: str | None = None
    # The key the guard found, for its limits, fair share and usage (app/tenants/).
    access: Access | None = None

    def tenant(self, cache_salt: str | None = None) -> str | None:
        """The request's tenant; None for the one tree that requests without a tenant share."""
        if self.scope == "shared":
            return None
        if cache_salt:
            return f"salt:{_digest(cache_salt)}"
        if self.authorization:
            return f"key:{_digest(self.authorization)}"
        return None
