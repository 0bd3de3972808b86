"""What happens to money after the rail accepted it (SPEC §17, §18): a refund goes `pending` → `processed` or
`failed`, an instant settlement `created` → `initiated` → `processed`, `partially_processed` or `reversed`, a
payout `processing` → `processed` (or `failed`, or `processed` and later `reversed`).

Off by default (`--lifecycle-ms 0`): a refund and a settlement are `processed` in the call's own answer, as the
sandbox has always answered, and a payout stays `processing` — RazorpayX test mode's own behaviour, where a payout
moves on only when moved by hand (here `POST /__sandbox/payouts/{id}/status`). With `--lifecycle-ms L` (env
INTERLOCK_SANDBOX_LIFECYCLE_MS) a new refund is answered `pending` and a new settlement `created`, and each moves on
by a schedule written to the journal in the same transaction as the entity, so a sandbox restarted in between
carries on where it was:

* refund: `processed` after L; with the fault `refund_bank_failure`, `failed` after L (the payment's refunded
  amount is given back, as the money never left); with `refund_pending_long`, `processed` only after `hold_ms`;
* settlement: `initiated` after L/2, `processed` after L; with `settlement_partial`, `partially_processed` after L
  (half settled, the rest `amount_pending`) and `processed` after 2L; with `settlement_reversed`, `reversed` after L
  (`amount_reversed` is what had been settled, credited back to the balance; the fees are not returned);
* payout, from the moment it starts `processing` (at once, or when a top-up releases it from the queue):
  `processed` after L; with `payout_failed`, `failed` after L; with `payout_reversed`, `processed` after L and
  `reversed` after 2L. Failed and reversed payouts give the business account back the amount and the fees, and
  that room releases queued payouts (sandbox/payout_states.py).

The schedule can be held (`POST /__sandbox/lifecycle {"held": true}`): nothing scheduled moves until it is released,
and then whatever fell due meanwhile moves at once, in its order. A test uses it to put its own events between a
payout's start and its failure, instead of racing the clock.

The faults (sandbox/faults.py, scope `lifecycle`) are drawn once per entity, as it is planned. Each change is a
journal event `entity_status_changed` and, with a webhook URL, an event: `refund.processed` / `refund.failed`
(Razorpay's names), `settlement.<status>` carrying the entity under `settlement.ondemand` — Razorpay documents
`settlement.processed` for its regular settlements but no events for instant ones; these are this sandbox's
assumption, and Interlock's poller follows a settlement whether or not they come — and `payout.<event>` as
sandbox/payout_states.py names them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sandbox import payout_states
from sandbox.faults import Fault, FaultSet
from sandbox.journal import Journal, now_ms
from sandbox.schema import ENTITY_KINDS, ensure_tables
from sandbox.webhooks import WebhookSender

logger = logging.getLogger(__name__)

TICK_S = 0.05
PLANS = {
    "refund": ("refund_bank_failure", "refund_pending_long"),
    "settlement": ("settlement_partial", "settlement_reversed"),
    "payout": ("payout_failed", "payout_reversed"),
}
# Where each kind's entity sits in a webhook's payload.
PAYLOAD_KEYS = {"refund": "refund", "settlement": "settlement.ondemand", "payout": "payout"}

_TABLES = {
    "lifecycle": f"""(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    entity_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ({", ".join(f"'{kind}'" for kind in ENTITY_KINDS)})),
    due_ms INTEGER NOT NULL,
    status TEXT NOT NULL
) STRICT"""
}
_INDEXES = ("CREATE INDEX IF NOT EXISTS lifecycle_due ON lifecycle (due_ms)",)


class Change(NamedTuple):
    """One entity that moved on: its kind, the status it left and the entity as it is now."""

    kind: str
    was: str
    entity: dict[str, Any]


@dataclass
class Lifecycle:
    journal: Journal
    faults: FaultSet
    lifecycle_ms: int = 0
    webhooks: WebhookSender | None = None
    # The RazorpayX business account payouts are paid from (and given back to).
    account_number: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    # While held the ticker applies nothing; due times stay as planned (sandbox-only, for tests).
    held: bool = False
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        ensure_tables(self.journal.conn, _TABLES, _INDEXES)  # a journal's older schedule table is rebuilt

    @property
    def on(self) -> bool:
        return self.lifecycle_ms > 0

    def first_status(self, kind: str) -> str:
        """The status a new refund or settlement is answered with."""
        if not self.on:
            return "processed"
        return "pending" if kind == "refund" else "created"

    def plan(self, conn: sqlite3.Connection, kind: str, entity_id: str, *, created_ms: int) -> None:
        """Write the entity's schedule, inside the transaction that inserts it (a payout: that starts it)."""
        if not self.on:
            return
        fault = next((f for name in PLANS[kind] if (f := self.faults.draw(name, "lifecycle")) is not None), None)
        steps = _steps(kind, fault, self.lifecycle_ms)
        conn.executemany("INSERT INTO lifecycle (entity_id, kind, due_ms, status) VALUES (?, ?, ?, ?)",
                         [(entity_id, kind, created_ms + after, status) for after, status in steps])  # fmt: skip
        if fault is not None:
            self.journal.event(conn, "lifecycle_fault", {"id": entity_id, "fault": fault.name})

    def unplan(self, conn: sqlite3.Connection, entity_id: str) -> None:
        """Drop what is still scheduled for the entity (it was moved on by hand)."""
        conn.execute("DELETE FROM lifecycle WHERE entity_id = ?", (entity_id,))

    # -- moving on ------------------------------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the ticker on the running loop (idempotent): at the first request, and so after a restart."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                if not self.held:
                    self.advance()
            except sqlite3.Error:
                logger.exception("lifecycle: the schedule could not be advanced; trying again")
            await asyncio.sleep(TICK_S)

    def advance(self, now: int | None = None) -> int:
        """Apply every scheduled change that is due; returns how many. Webhooks go out after the commit."""
        now = now_ms() if now is None else now
        due = self.journal.conn.execute(
            "SELECT seq, entity_id, kind, status FROM lifecycle WHERE due_ms <= ? ORDER BY due_ms, seq", (now,)
        ).fetchall()
        if not due:
            return 0
        changes: list[Change] = []
        with self.journal.transaction() as conn:
            for seq, entity_id, kind, status in due:
                conn.execute("DELETE FROM lifecycle WHERE seq = ?", (seq,))
                row = conn.execute("SELECT entity_json FROM entities WHERE id = ?", (entity_id,)).fetchone()
                if row is not None:
                    changes += self.step(conn, kind, json.loads(row[0]), status)
        self.announce(changes)
        return len(changes)

    def step(self, conn: sqlite3.Connection, kind: str, was: dict[str, Any], status: str) -> list[Change]:
        """Move one entity to *status* inside *conn*'s transaction; returns every change that caused."""
        if kind == "payout":
            return self.move_payout(conn, was, status)
        entity = _moved(conn, kind, was, status)
        self.journal.set_status(conn, entity, was=was)
        return [Change(kind, was["status"], entity)]

    def move_payout(self, conn: sqlite3.Connection, was: dict[str, Any], status: str) -> list[Change]:
        """A payout's change (scheduled, or by hand), with its money; a payout moved on meanwhile is left alone."""
        try:
            payout = payout_states.moved(was, status)
        except payout_states.IllegalTransition as exc:
            self.journal.event(conn, "lifecycle_step_skipped", {"id": exc.payout_id, "was": exc.was, "now": exc.now})
            return []
        self.journal.set_status(conn, payout, was=was)
        changes = [Change("payout", was["status"], payout)]
        if payout_states.refund_on(was["status"], status):
            self.journal.move_banking_balance(conn, self.account_number, payout_states.cost(was))
            changes += self.release_queued(conn)
        return changes

    def release_queued(self, conn: sqlite3.Connection) -> list[Change]:
        """Start every queued payout the business account can now pay for, oldest first (Razorpay's FIFO:
        one that does not fit lets the next one go)."""
        changes: list[Change] = []
        for queued in self.journal.entities_in_status(conn, "payout", "queued"):
            balance = self.journal.banking_balance(self.account_number)
            if payout_states.cost(queued) > (0 if balance is None else balance[0]):
                continue
            payout = payout_states.moved(queued, "processing")
            self.journal.move_banking_balance(conn, self.account_number, -payout_states.cost(queued))
            self.journal.set_status(conn, payout, was=queued)
            self.plan(conn, "payout", payout["id"], created_ms=now_ms())
            changes.append(Change("payout", "queued", payout))
        return changes

    def announce(self, changes: list[Change]) -> None:
        """Count, log and send the webhook of each change (after its commit)."""
        for change in changes:
            status = change.entity["status"]
            self.counts[status] = self.counts.get(status, 0) + 1
            logger.info("%s %s is now %s (was %s)", change.kind, change.entity["id"], status, change.was)
            if self.webhooks is not None:
                event = payout_states.event(status) if change.kind == "payout" else f"{change.kind}.{status}"
                self.webhooks.emit(event, PAYLOAD_KEYS[change.kind], change.entity)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _steps(kind: str, fault: Fault | None, length: int) -> list[tuple[int, str]]:
    """(delay after the entity's start, status) of each scheduled change."""
    drawn = None if fault is None else fault.name
    if kind == "refund":
        if drawn == "refund_bank_failure":
            return [(length, "failed")]
        if fault is not None and drawn == "refund_pending_long":
            return [(max(int(fault.param("hold_ms")), length), "processed")]
        return [(length, "processed")]
    if kind == "payout":
        if drawn == "payout_failed":
            return [(length, "failed")]
        if drawn == "payout_reversed":
            return [(length, "processed"), (2 * length, "reversed")]
        return [(length, "processed")]
    if drawn == "settlement_partial":
        return [(length // 2, "initiated"), (length, "partially_processed"), (2 * length, "processed")]
    if drawn == "settlement_reversed":
        return [(length // 2, "initiated"), (length, "reversed")]
    return [(length // 2, "initiated"), (length, "processed")]


def _moved(conn: sqlite3.Connection, kind: str, was: dict[str, Any], status: str) -> dict[str, Any]:
    entity = {**was, "status": status}
    if kind == "refund":
        if status == "failed":  # the money never reached the customer: the payment may be refunded again
            conn.execute("UPDATE payments SET amount_refunded = MAX(0, amount_refunded - ?) WHERE id = ?",
                         (int(was["amount"]), was["payment_id"]))  # fmt: skip
        return entity
    requested, fees = int(was["amount_requested"]), int(was["fees"])
    if status == "partially_processed":
        half = (requested - fees) // 2
        entity.update(amount_settled=half, amount_pending=requested - fees - half)
    elif status == "processed":
        entity.update(amount_settled=requested - fees, amount_pending=0)
    elif status == "reversed":
        entity.update(amount_settled=0, amount_pending=0, amount_reversed=requested - fees)
        conn.execute("UPDATE balances SET amount = amount + ? WHERE currency = ?",
                     (requested - fees, was["currency"]))  # fmt: skip
    return entity
