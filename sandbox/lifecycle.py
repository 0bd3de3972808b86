"""What happens to money after the rail accepted it (SPEC §17): a refund goes `pending` → `processed` or `failed`,
an instant settlement `created` → `initiated` → `processed`, `partially_processed` or `reversed`.

Off by default (`--lifecycle-ms 0`): a refund and a settlement are `processed` in the call's own answer, as the
sandbox has always answered. With `--lifecycle-ms L` (env INTERLOCK_SANDBOX_LIFECYCLE_MS) a new refund is answered
`pending` and a new settlement `created`, and each moves on by a schedule written to the journal in the same
transaction as the entity, so a sandbox restarted in between carries on where it was:

* refund: `processed` after L; with the fault `refund_bank_failure`, `failed` after L (the payment's refunded
  amount is given back, as the money never left); with `refund_pending_long`, `processed` only after `hold_ms`;
* settlement: `initiated` after L/2, `processed` after L; with `settlement_partial`, `partially_processed` after L
  (half settled, the rest `amount_pending`) and `processed` after 2L; with `settlement_reversed`, `reversed` after L
  (`amount_reversed` is what had been settled, credited back to the balance; the fees are not returned).

The faults (sandbox/faults.py, scope `lifecycle`) are drawn once per entity, as it is created. Each change is a
journal event `entity_status_changed` and, with a webhook URL, an event: `refund.processed` / `refund.failed`
(Razorpay's names), and `settlement.<status>` carrying the entity under `settlement.ondemand` — Razorpay documents
`settlement.processed` for its regular settlements but no events for instant ones; these are this sandbox's
assumption, and Interlock's poller follows a settlement whether or not they come.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from sandbox.faults import FaultSet
from sandbox.journal import Journal, dump, now_ms
from sandbox.schema import ENTITY_KINDS, ensure_tables
from sandbox.webhooks import WebhookSender

logger = logging.getLogger(__name__)

TICK_S = 0.05
REFUND_PLANS = ("refund_bank_failure", "refund_pending_long")
SETTLEMENT_PLANS = ("settlement_partial", "settlement_reversed")

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


@dataclass
class Lifecycle:
    journal: Journal
    faults: FaultSet
    lifecycle_ms: int = 0
    webhooks: WebhookSender | None = None
    counts: dict[str, int] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        ensure_tables(self.journal.conn, _TABLES, _INDEXES)  # a journal's older schedule table is rebuilt

    @property
    def on(self) -> bool:
        return self.lifecycle_ms > 0

    def first_status(self, kind: str) -> str:
        """The status a new entity is answered with."""
        if not self.on:
            return "processed"
        return "pending" if kind == "refund" else "created"

    def plan(self, conn: sqlite3.Connection, kind: str, entity_id: str, *, created_ms: int) -> None:
        """Write the entity's schedule, inside the transaction that inserts it."""
        if not self.on:
            return
        length = self.lifecycle_ms
        fault = next((f for name in (REFUND_PLANS if kind == "refund" else SETTLEMENT_PLANS)
                      if (f := self.faults.draw(name, "lifecycle")) is not None), None)  # fmt: skip
        drawn = None if fault is None else fault.name
        steps: list[tuple[int, str]]
        if kind == "refund":
            if drawn == "refund_bank_failure":
                steps = [(length, "failed")]
            elif drawn == "refund_pending_long":
                assert fault is not None
                steps = [(max(int(fault.param("hold_ms")), length), "processed")]
            else:
                steps = [(length, "processed")]
        elif drawn == "settlement_partial":
            steps = [(length // 2, "initiated"), (length, "partially_processed"), (2 * length, "processed")]
        elif drawn == "settlement_reversed":
            steps = [(length // 2, "initiated"), (length, "reversed")]
        else:
            steps = [(length // 2, "initiated"), (length, "processed")]
        conn.executemany("INSERT INTO lifecycle (entity_id, kind, due_ms, status) VALUES (?, ?, ?, ?)",
                         [(entity_id, kind, created_ms + after, status) for after, status in steps])  # fmt: skip
        if drawn is not None:
            self.journal.event(conn, "lifecycle_fault", {"id": entity_id, "fault": drawn})

    # -- moving on ------------------------------------------------------------------------------------

    def ensure_running(self) -> None:
        """Start the ticker on the running loop (idempotent): at the first request, and so after a restart."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
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
        changed: list[tuple[str, dict[str, Any]]] = []
        with self.journal.transaction() as conn:
            for seq, entity_id, kind, status in due:
                conn.execute("DELETE FROM lifecycle WHERE seq = ?", (seq,))
                row = conn.execute("SELECT entity_json FROM entities WHERE id = ?", (entity_id,)).fetchone()
                if row is None:
                    continue
                was = json.loads(row[0])
                entity = self._moved(conn, kind, was, status)
                conn.execute("UPDATE entities SET entity_json = ? WHERE id = ?", (dump(entity, sort=False), entity_id))
                self.journal.event(conn, "entity_status_changed", {"id": entity_id, "was": was.get("status"),
                                                                   "now": status})  # fmt: skip
                changed.append((kind, entity))
        for kind, entity in changed:
            self.counts[entity["status"]] = self.counts.get(entity["status"], 0) + 1
            logger.info("%s %s is now %s", kind, entity["id"], entity["status"])
            if self.webhooks is not None:
                if kind == "refund":
                    self.webhooks.emit(f"refund.{entity['status']}", "refund", entity)
                else:
                    self.webhooks.emit(f"settlement.{entity['status']}", "settlement.ondemand", entity)
        return len(changed)

    def _moved(self, conn: sqlite3.Connection, kind: str, was: dict[str, Any], status: str) -> dict[str, Any]:
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

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
