"""Idempotency keys on money calls, as Razorpay keeps them (SPEC §14, §18).

Refunds (`X-Refund-Idempotency`, optional) and payouts (`X-Payout-Idempotency`, mandatory) are two key spaces:
a key used for a refund says nothing about a payout. In either, the same key with the same body answers the
entity the first request created (as it is now), the same key with another body is refused (400), and a
request arriving while the first one with its key is still being processed is answered 409. A key is recorded
in the transaction that creates its entity, so a request refused or never applied (400, `fail_504`) leaves
the key free for the retry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response

from sandbox.errors import RailHttpError
from sandbox.journal import dump
from sandbox.rail import Rail

IN_PROGRESS = "A request with this idempotency key is still being processed"
OTHER_BODY = "The idempotency key was already used with a different request body"


@dataclass(frozen=True)
class KeySpace:
    """One API's idempotency keys: the header that carries them and the entity kind a key answers."""

    scope: str
    header: str
    kind: str


REFUNDS = KeySpace("refund", "X-Refund-Idempotency", "refund")
PAYOUTS = KeySpace("payout", "X-Payout-Idempotency", "payout")


def body_hash(body: Any) -> str:
    """What "the same body" means: the same JSON value, whatever its key order or spacing."""
    return hashlib.sha256(dump(body).encode()).hexdigest()


def replay(rail: Rail, space: KeySpace, key: str, digest: str) -> Response | None:
    """The answer a known key already has (409, 400 or the entity it created); None for a key not seen yet."""
    if (space.scope, key) in rail.in_progress:
        raise RailHttpError(IN_PROGRESS, status=409, field=space.header)
    known = rail.journal.idempotency_key(key, space.scope)
    if known is None:
        return None
    if known[0] != digest:
        raise RailHttpError(OTHER_BODY, field=space.header)
    found = rail.journal.entity(known[1], space.kind)
    # Always found: the key and its entity commit in one transaction.
    return None if found is None else JSONResponse(found[0])


async def claimed(rail: Rail, space: KeySpace, key: str | None, call: Callable[[], Awaitable[Response]]) -> Response:
    """Run *call* with *key* marked in progress, so that a second request with it is answered 409 meanwhile."""
    if key is None:
        return await call()
    rail.in_progress.add((space.scope, key))
    try:
        return await call()
    finally:
        rail.in_progress.discard((space.scope, key))
