"""The running rail: its journal, its faults, and the fault choreography around every call.

Handlers run on one asyncio loop and touch SQLite synchronously, so everything between two awaits
is atomic: a check and the write it guards can never interleave with another request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from sandbox import payout_states
from sandbox.errors import SERVER_ERROR, error_body, not_found
from sandbox.faults import Fault, FaultSet
from sandbox.journal import Journal, now_ms
from sandbox.lifecycle import Lifecycle
from sandbox.webhooks import WebhookSender

logger = logging.getLogger(__name__)

GATEWAY_HTML = (
    "<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n"
    "<center><h1>504 Gateway Time-out</h1></center>\r\n</body>\r\n</html>\r\n"
)
_SECRET_HEADERS = {"authorization", "cookie", "proxy-authorization"}
# The RazorpayX account payouts are made from when INTERLOCK_SANDBOX_ACCOUNT_NUMBER does not say: the account
# number of Razorpay's own payout examples.
DEFAULT_ACCOUNT_NUMBER = "7878780080316316"


@dataclass
class Applied:
    """What a money call did: the entity it created (or found) and its kind."""

    kind: str
    entity: dict[str, Any]


@dataclass
class Rail:
    journal: Journal
    faults: FaultSet
    key_id: str
    key_secret: str
    # (key space, idempotency key) whose first request is still being processed (answered 409 meanwhile).
    in_progress: set[tuple[str, str]] = field(default_factory=set)
    # Slow applies run as tasks so a client that hangs up cannot cancel them: the entity still lands.
    tasks: set[asyncio.Task[Response]] = field(default_factory=set)
    # Where Razorpay-style webhooks go (SPEC §17), when a URL is configured.
    webhooks: WebhookSender | None = None
    # How long after the call a refund or settlement reaches its final status (0: in the call's own answer).
    lifecycle_ms: int = 0
    # The RazorpayX business account (`account_number` of every payout call).
    account_number: str = DEFAULT_ACCOUNT_NUMBER
    lifecycle: Lifecycle = field(init=False)
    # Every slow delay now waiting ends when this is set (POST /__sandbox/slow/release): a test orders its own calls
    # against a slow request by releasing it, instead of racing its delay_ms. Replaced at each release.
    _slow_release: asyncio.Event | None = field(default=None, repr=False)
    slow_waiting: int = 0

    def __post_init__(self) -> None:
        self.lifecycle = Lifecycle(self.journal, self.faults, self.lifecycle_ms, self.webhooks, self.account_number)
        if self.webhooks is not None and self.webhooks.journal is None:
            self.webhooks.journal = self.journal

    def notify(self, applied: Applied) -> None:
        """The webhooks an entity just created causes: delivered whatever the call that created it is answered."""
        if self.webhooks is None:
            return
        for event in _creation_events(applied):
            self.webhooks.emit(event, applied.kind, applied.entity)

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        # compare_digest on both halves: no early exit leaks which one was wrong.
        ok_user = hmac.compare_digest(user.encode(), self.key_id.encode())
        ok_secret = hmac.compare_digest(password.encode(), self.key_secret.encode())
        return ok_user and ok_secret

    async def slow_delay(self, slow: Fault) -> None:
        """Wait out a slow fault's delay_ms, or less if the slow requests are released meanwhile."""
        if self._slow_release is None:
            self._slow_release = asyncio.Event()
        released = self._slow_release
        self.slow_waiting += 1
        try:
            await asyncio.wait_for(released.wait(), slow.param("delay_ms") / 1000)
        except TimeoutError:
            pass
        finally:
            self.slow_waiting -= 1

    def release_slow(self) -> int:
        """End the delay of every slow request now waiting (later ones wait out theirs); returns how many."""
        waiting, released, self._slow_release = self.slow_waiting, self._slow_release, None
        if released is not None:
            released.set()
        return waiting

    async def read_faults(self) -> Response | None:
        """slow / 504 profiles scoped to reads; a response here replaces the read's answer."""
        slow = self.faults.draw("slow", "reads")
        if slow is not None:
            await self.slow_delay(slow)
        for name in ("fail_504", "ambiguous_504"):
            fault = self.faults.draw(name, "reads")
            if fault is not None:
                return gateway_timeout(self.faults.chance(fault.param("html")))
        return None

    def lag_cutoff_ms(self) -> int | None:
        """Entities created after this instant are invisible to this read (replica_lag), or None."""
        fault = self.faults.draw("replica_lag", "reads")
        return None if fault is None else now_ms() - int(fault.param("lag_ms"))

    def visible(self, rows: list[tuple[dict[str, Any], int]]) -> list[dict[str, Any]]:
        """The entities of *rows* (entity, created_ms) this read sees: replica_lag hides the youngest."""
        cutoff = self.lag_cutoff_ms()
        return [entity for entity, created in rows if cutoff is None or created <= cutoff]

    def visible_entity(self, entity_id: str, kind: str) -> dict[str, Any]:
        """The entity, as a fetch sees it; one the replica has not caught up with does not exist yet."""
        found = self.journal.entity(entity_id, kind)
        cutoff = self.lag_cutoff_ms()
        if found is None or (cutoff is not None and found[1] > cutoff):
            raise not_found()
        return found[0]

    def deep_page(self, list_key: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """*items* reordered by the deep_page fault: the newest move to the end, each still listed exactly once."""
        newest = self.faults.deep_page(list_key)
        if newest <= 0 or len(items) <= 1:
            return items
        return items[newest:] + items[:newest]

    async def money_call(self, apply: Callable[[str | None], Applied], describe: Mapping[str, Any]) -> Response:
        """Run *apply* under the money-scoped faults; the journal write happens inside *apply*."""
        failed = self.faults.draw("fail_504", "money")
        if failed is not None:
            self.journal.log_event("fault_fail_504", describe)
            return gateway_timeout(self.faults.chance(failed.param("html")))
        slow = self.faults.draw("slow", "money")
        ambiguous = self.faults.draw("ambiguous_504", "money")
        dup = self.faults.draw("dup_response", "money")
        html = ambiguous is not None and self.faults.chance(ambiguous.param("html"))
        fired = ",".join(f.name for f in (slow, ambiguous, dup) if f is not None) or None

        async def run() -> Response:
            if slow is not None:
                await self.slow_delay(slow)
            applied = apply(fired)
            self.notify(applied)
            if ambiguous is not None:
                return gateway_timeout(html)
            if dup is not None:
                earlier = self.journal.latest_entity_except(applied.kind, applied.entity["id"])
                if earlier is not None:
                    return JSONResponse(earlier)
                self.journal.log_event("fault_dup_response_skipped", {"reason": "no earlier entity", **describe})
            return JSONResponse(applied.entity)

        if slow is None:
            return await run()
        return await self.detached(run())

    async def detached(self, work: Coroutine[Any, Any, Response]) -> Response:
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return await asyncio.shield(task)


def _creation_events(applied: Applied) -> list[str]:
    status = applied.entity.get("status")
    if applied.kind == "refund":
        return ["refund.created"] + (["refund.processed"] if status == "processed" else [])
    if applied.kind == "payout":
        return [payout_states.event(str(status))]  # payout.initiated, or payout.queued
    return []  # an instant settlement sends webhooks only as its lifecycle moves it


def gateway_timeout(html: bool) -> Response:
    # A gateway in front of the rail answers 504 in HTML; the client must treat it as ambiguous (SPEC §14).
    if html:
        return HTMLResponse(GATEWAY_HTML, status_code=504)
    body = error_body(SERVER_ERROR, "The server encountered an error. The incident has been reported to admins.")
    return JSONResponse(body, status_code=504)


def recorded_headers(request: Request) -> dict[str, str]:
    """Request headers worth journaling; credentials are never written to disk."""
    return {k: v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS}


def collection(items: list[dict[str, Any]]) -> dict[str, Any]:
    # `count` is the size of this page, not a total (SPEC §14).
    return {"entity": "collection", "count": len(items), "items": items}


def notes_out(notes: Mapping[str, Any]) -> Any:
    # Razorpay serialises empty notes as [] (a PHP empty array), not {} (SPEC §14).
    return dict(notes) if notes else []
