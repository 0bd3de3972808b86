"""Webhook deliveries, as Razorpay makes them (SPEC §17): signed events POSTed to a configured URL, retried.

Each event is the Razorpay envelope (`{"entity": "event", "account_id", "event", "contains", "payload",
"created_at"}`), its raw bytes signed with HMAC-SHA256 under the webhook secret (`X-Razorpay-Signature`, hex),
with its own `x-razorpay-event-id`. An answer other than 2xx, or none within 5 seconds, is a failed delivery:
it is delivered again with exponential backoff (Razorpay goes on for 24 hours; here `max_age_s`, default one hour).
Deliveries run after the call that caused them has been answered and in no promised order; each retry is a
fresh delivery of the same event id and bytes.

Events emitted: `refund.created` and, when the lifecycle is off (a refund settled in its own answer),
`refund.processed` at once; with `--lifecycle-ms`, `refund.<status>` and `settlement.<status>` as each entity
moves (sandbox/lifecycle.py). The sandbox keeps its outbox in memory: a sandbox restart loses what was not
delivered yet (Razorpay does not). Each event's fate is a journal event (`webhook_emitted`, `webhook_delivered`
with its attempts, `webhook_given_up`), so that a test can hold the receiver's inbox against what was sent.

Faults (sandbox/faults.py, scope `webhooks`, drawn once per event as it is emitted): `webhook_drop` (never
delivered), `webhook_duplicate` (delivered twice, same id and bytes), `webhook_delay` (held `delay_ms` first,
so later events overtake it), `webhook_bad_signature` (the first delivery is signed with a wrong secret; the
retry after its 401 is signed right).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from sandbox.faults import FaultSet
from sandbox.journal import Journal, new_id

logger = logging.getLogger(__name__)

DELIVERY_TIMEOUT_S = 5.0  # Razorpay counts a delivery not answered within 5 seconds as failed
FIRST_RETRY_S = 0.5
MAX_RETRY_S = 60.0


def sign(body: bytes, secret: str) -> str:
    return hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def envelope(event: str, key: str, entity: dict[str, Any], *, account_id: str, at_s: int) -> bytes:
    return json.dumps({"entity": "event", "account_id": account_id, "event": event, "contains": [key],
                       "payload": {key: {"entity": entity}}, "created_at": at_s},
                      separators=(",", ":")).encode("utf-8")  # fmt: skip


@dataclass
class Delivery:
    event_id: str
    event: str
    body: bytes
    first_at: float
    attempts: int = 0
    delay_s: float = 0.0
    bad_signature: bool = False


@dataclass
class WebhookSender:
    url: str
    secret: str
    account_id: str
    faults: FaultSet | None = None
    max_age_s: float = 3600.0
    transport: httpx.AsyncBaseTransport | None = None  # tests only: where the POSTs go instead of the network
    # Where each event's fate is recorded (journal events webhook_emitted / _delivered / _given_up), so that a
    # harness can hold the receiver's inbox against what was sent: the rail sets its own journal here.
    journal: Journal | None = None
    counts: Counter[str] = field(default_factory=Counter)
    _queue: asyncio.Queue[Delivery] | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _client: httpx.AsyncClient | None = None

    def emit(self, event: str, key: str, entity: dict[str, Any]) -> str:
        """Queue one event for delivery; returns its event id. Call from the running loop."""
        delivery = Delivery(new_id("evt_"), event, envelope(event, key, entity, account_id=self.account_id,
                                                             at_s=int(time.time())), time.monotonic())  # fmt: skip
        self.counts["emitted"] += 1
        copies, dropped = 1, False
        if self.faults is not None:
            dropped = self.faults.draw("webhook_drop", "webhooks") is not None
        if dropped:
            self.counts["dropped"] += 1
        elif self.faults is not None:
            copies += self.faults.draw("webhook_duplicate", "webhooks") is not None
            delayed = self.faults.draw("webhook_delay", "webhooks")
            delivery.delay_s = 0.0 if delayed is None else delayed.param("delay_ms") / 1000
            delivery.bad_signature = self.faults.draw("webhook_bad_signature", "webhooks") is not None
        self._record("webhook_emitted", {"event_id": delivery.event_id, "event": event, "entity_id": entity.get("id"),
                                         "dropped": dropped, "copies": 0 if dropped else copies})  # fmt: skip
        if dropped:
            return delivery.event_id
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._client = httpx.AsyncClient(timeout=DELIVERY_TIMEOUT_S, transport=self.transport)
            task = asyncio.get_running_loop().create_task(self._run())
            self._tasks.add(task)
        for copy in range(copies):
            self._queue.put_nowait(delivery if copy == 0 else replace(delivery, bad_signature=False))
        return delivery.event_id

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            delivery = await self._queue.get()
            task = asyncio.get_running_loop().create_task(self._deliver(delivery))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, delivery: Delivery) -> None:
        assert self._client is not None
        if delivery.delay_s:
            await asyncio.sleep(delivery.delay_s)
        while True:
            delivery.attempts += 1
            secret = self.secret
            if delivery.bad_signature and delivery.attempts == 1:
                secret = "not-" + self.secret
            status: int | str
            try:
                answer = await self._client.post(self.url, content=delivery.body, headers={
                    "Content-Type": "application/json", "X-Razorpay-Signature": sign(delivery.body, secret),
                    "x-razorpay-event-id": delivery.event_id,
                })  # fmt: skip
                status = answer.status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            if isinstance(status, int) and 200 <= status < 300:
                self.counts["delivered"] += 1
                self._record("webhook_delivered", {"event_id": delivery.event_id, "attempts": delivery.attempts})
                return
            self.counts["failed_attempts"] += 1
            wait = min(FIRST_RETRY_S * 2 ** (delivery.attempts - 1), MAX_RETRY_S)
            if time.monotonic() + wait - delivery.first_at > self.max_age_s:
                self.counts["given_up"] += 1
                self._record("webhook_given_up", {"event_id": delivery.event_id, "attempts": delivery.attempts,
                                                  "last": status})  # fmt: skip
                logger.warning("webhook %s (%s) given up after %d attempts (last: %s)", delivery.event_id,
                               delivery.event, delivery.attempts, status)  # fmt: skip
                return
            logger.info("webhook %s (%s) attempt %d: %s; again in %.1fs", delivery.event_id, delivery.event,
                        delivery.attempts, status, wait)  # fmt: skip
            await asyncio.sleep(wait)

    def _record(self, kind: str, detail: dict[str, Any]) -> None:
        if self.journal is None:
            return
        try:
            self.journal.log_event(kind, detail)
        except sqlite3.Error:  # the record is for harnesses: a delivery never fails for want of it
            logger.exception("webhook %s: %s not journalled", detail.get("event_id"), kind)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
