"""The webhook receiver (SPEC §17): `POST /webhooks/razorpay`, verify, store durably, acknowledge.

Each delivery is judged in this order, and a refused one records nothing but a count of its reason:
429 over the configured rate, 413 when the body is over 1 MiB (read no further than that), 401 when
`X-Razorpay-Signature` is missing or matches none of the secrets (checked over the raw bytes, before anything
parses them), 400 when the event id header is missing or the body is not a Razorpay event. An event that passes
is committed to the inbox (ledger.webhook_inbox) and only then answered 200, `accepted`, or `duplicate` for an
event id already stored. A failed write is answered 503, so that Razorpay delivers the event again.

Nothing here acts on an event: the receiver answers in milliseconds, far inside Razorpay's 5 seconds, and the
inbox's readers decide what each event is evidence of (of presence only, never of absence).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from interlock.clock import now_ms
from interlock.failpoints import failpoint
from ledger import webhook_inbox
from webhooks.signature import verify

logger = logging.getLogger(__name__)

PATH = "/webhooks/razorpay"
MAX_BODY_BYTES = 1024 * 1024
EVENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
SIGNATURE_HEADER = "x-razorpay-signature"
EVENT_ID_HEADER = "x-razorpay-event-id"


class TooLarge(Exception):
    pass


@dataclass
class RateLimit:
    """A token bucket: *per_second* deliveries on average, bursts of as many."""

    per_second: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = 0.0
    at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.tokens, self.at = self.per_second, self.clock()

    def take(self) -> bool:
        with self._lock:
            now = self.clock()
            self.tokens = min(self.per_second, self.tokens + (now - self.at) * self.per_second)
            self.at = now
            if self.tokens < 1:
                return False
            self.tokens -= 1
            return True


class Receiver:
    def __init__(self, inbox: Path, secrets: Sequence[str], *, rate_per_second: float) -> None:
        self.secrets = tuple(secrets)
        self.rate = RateLimit(rate_per_second)
        self.refused: Counter[str] = Counter()  # this process's refusals by reason (the inbox keeps the total)
        self._conn = webhook_inbox.open_inbox(inbox)
        self._lock = threading.Lock()  # one connection, one writer at a time

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    async def handle(self, request: Request) -> Response:
        # First, before a byte of the body is read: every later refusal is counted on disk, so the rate bounds the
        # writes a flood can cause. One bucket for all senders (Razorpay delivers from many addresses), so unsigned
        # traffic can crowd out real deliveries: Razorpay retries a 429 with backoff for 24 hours.
        if not self.rate.take():
            self.refused["rate_limited"] += 1  # in memory only: counting it on disk would cost a write per request
            return JSONResponse({"error": "rate_limited"}, status_code=429, headers={"Retry-After": "1"})
        try:
            body = await _bounded_body(request)
        except TooLarge:
            return await run_in_threadpool(self._refuse, 413, "body_too_large",
                                           f"the body exceeds {MAX_BODY_BYTES} bytes")  # fmt: skip
        return await run_in_threadpool(self.judge, body, request.headers.get(SIGNATURE_HEADER),
                                       request.headers.get(EVENT_ID_HEADER, ""))  # fmt: skip

    def judge(self, body: bytes, signature: str | None, event_id: str) -> JSONResponse:
        """A delivery whose body is read: verified, parsed and stored, or refused with its reason counted. In a
        worker thread (the inbox is SQLite); the seeded simulation delivers its events here."""
        if not signature:
            return self._refuse(401, "signature_missing", "the X-Razorpay-Signature header is missing (or empty)")
        if not verify(body, signature, self.secrets):
            return self._refuse(401, "signature_mismatch", "X-Razorpay-Signature does not verify with any configured "
                                "secret")  # fmt: skip
        if not EVENT_ID.match(event_id):
            return self._refuse(400, "event_id_missing", "x-razorpay-event-id is missing or malformed")
        event = _event(body)
        if isinstance(event, str):
            return self._refuse(400, "malformed_event", event)
        created = event.get("created_at")
        created = created if isinstance(created, int) and not isinstance(created, bool) else None
        account = event.get("account_id")
        try:
            stored = self._store(event_id, body, str(event["event"]), account if isinstance(account, str) else None,
                                 created)
        except sqlite3.Error as exc:
            logger.error("webhook %s not stored (%s): answered 503 so that Razorpay delivers it again", event_id, exc)
            return JSONResponse({"error": "not_stored"}, status_code=503, headers={"Retry-After": "5"})
        if not stored.same_body:
            logger.warning("webhook %s delivered again with another body: the first one is kept", event_id)
        status = "accepted" if stored.new else "duplicate"
        logger.info("webhook %s %s %s", event_id, event["event"], status)
        return JSONResponse({"status": status, "event_id": event_id})

    def _store(self, event_id: str, body: bytes, event: str, account: str | None,
               created: int | None) -> webhook_inbox.Stored:  # fmt: skip
        with self._lock:
            stored = webhook_inbox.store(self._conn, event_id=event_id, body=body, event=event, account_id=account,
                                         created_at=created, now=now_ms())  # fmt: skip
            failpoint("webhooks.after_store_before_ack")
            return stored

    def _refuse(self, status: int, reason: str, detail: str) -> JSONResponse:
        self.refused[reason] += 1
        try:
            self._count(reason)
        except sqlite3.Error as exc:
            logger.warning("refusal %s not counted in the inbox: %s", reason, exc)
        return JSONResponse({"error": reason, "detail": detail}, status_code=status)

    def _count(self, reason: str) -> None:
        with self._lock:
            webhook_inbox.count_refusal(self._conn, reason)


async def _bounded_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise TooLarge  # refused before a byte of it is read
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _event(body: bytes) -> dict[str, Any] | str:
    """The parsed event, or why it is not one. Duplicate keys are refused: two readers could take different ones."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"duplicate key {sorted(k for k in keys if keys.count(k) > 1)[0]!r}")
        return dict(pairs)

    try:
        event = json.loads(body, object_pairs_hook=no_duplicates)
    except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
        return f"the body is not JSON: {exc}"
    if not isinstance(event, dict) or event.get("entity") != "event":
        return 'the body is not a Razorpay event (no "entity": "event")'
    if not isinstance(event.get("event"), str) or not event["event"]:
        return 'the event has no "event" name'
    if not isinstance(event.get("payload"), dict):
        return 'the event has no "payload" object'
    return event


def create_app(receiver: Receiver) -> Starlette:
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route(PATH, receiver.handle, methods=["POST"]),
                             Route("/webhooks/health", health, methods=["GET"])])  # fmt: skip
