"""Boot and the singleton lease (SPEC §8 step 1).

Take the lease (refuse while another owner's heartbeat is fresh; take over with epoch + 1 when it is
stale), verify the audit chain (refuse to start on a break), then move IN_FLIGHT rows written under an
earlier epoch to UNKNOWN (LEASE_EXPIRED) — their call may or may not have reached the rail, so only
the reconciler may say which. A row whose own lease (plus the call's total deadline) has not run out
is left alone: its worker may be paused rather than dead and may still be inside the call it was
allowed to make (ADR 0005). The reconciler's sweep takes it once that time has passed.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from interlock.clock import now_ms
from interlock.errors import AuditChainBroken, StaleLease
from ledger import audit, intents, leases, restore
from ledger.db import open_ledger, transaction
from ledger.intents import abandon_after
from ledger.states import Event, State
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)


def boot(rt: RailRuntime) -> list[tuple[str, str]]:
    """Take the lease and recover; returns AUTHORIZED intents (merchant_id, sik) that need executing."""
    bad = audit.verify_chain(rt.ledger)
    if bad is not None:
        raise AuditChainBroken(bad)
    # A replica may lag the lost primary: nothing moves until the rail has said what the lost tail did.
    restore.refuse_if_pending(rt.ledger, "the rail worker")
    ttl = rt.settings.lease_ttl_ms
    with transaction(rt.ledger):
        rt.lease = leases.acquire(rt.ledger, leases.RAIL_WORKER_LEASE, rt.owner, now=now_ms(), ttl_ms=ttl)
    logger.info("rail worker %s holds the lease at epoch %d", rt.owner, rt.lease.epoch)
    expired = rt.ledger.execute(
        "SELECT merchant_id, sik, attempt_seq FROM intents WHERE state = ? AND COALESCE(lease_epoch, 0) < ?",
        (State.IN_FLIGHT.value, rt.lease.epoch),
    ).fetchall()
    for row in expired:
        with transaction(rt.ledger):
            intent = intents.require_intent(rt.ledger, row["merchant_id"], row["sik"])
            now = now_ms()
            until = abandon_after(rt.ledger, intent, rt.settings.rail_timeout_ms, rt.settings.clock_skew_ms)
            if intent.state is not State.IN_FLIGHT or now < until:
                logger.warning("intent %s is IN_FLIGHT under epoch %s for %d ms more; leaving it to the reconciler",
                               row["sik"], intent.lease_epoch, until - now)  # fmt: skip
                continue
            intents.transition(rt.ledger, row["merchant_id"], row["sik"], Event.LEASE_EXPIRED, now=now,
                               detail={"recovered_by_epoch": rt.lease.epoch}, actor=rt.owner)  # fmt: skip
        rt.hint_reconciler(row["merchant_id"], row["sik"])
        logger.warning("intent %s was IN_FLIGHT under an earlier epoch: now UNKNOWN for the reconciler", row["sik"])
    stranded = rt.ledger.execute(
        "SELECT merchant_id, sik FROM intents WHERE state = ? ORDER BY updated_at", (State.AUTHORIZED.value,)
    ).fetchall()
    return [(r["merchant_id"], r["sik"]) for r in stranded]


class Heartbeat(threading.Thread):
    """Extends the lease every ttl/3 on its own connection; on losing it, stops the worker at once."""

    def __init__(self, rt: RailRuntime) -> None:
        super().__init__(name="lease-heartbeat", daemon=True)
        self.rt = rt
        self.on_lost = rt.lease_lost
        self.stopping = threading.Event()

    def run(self) -> None:
        conn = open_ledger(self.rt.ledger_path)  # its own connection: sqlite3 connections are not shared
        while not self.stopping.wait(self.rt.settings.lease_ttl_ms / 3000):
            if not self.beat(conn):
                return
        conn.close()

    def beat(self, conn: sqlite3.Connection) -> bool:
        """Renew the lease once, on *conn*; False once it is lost, when the worker has been told to stop. What
        the thread does every ttl/3 (the simulator calls it on its own schedule)."""
        lease = self.rt.current_lease()
        try:
            with transaction(conn):
                lease = leases.heartbeat(conn, lease, now=now_ms(), ttl_ms=self.rt.settings.lease_ttl_ms)
            self.rt.lease = lease  # what execute's send check measures the worker's lease by
        except StaleLease:
            logger.error("lease lost: epoch %d was superseded or expired; this rail worker stops now", lease.epoch)
            self.on_lost.set()
            return False
        except Exception:
            logger.exception("lease heartbeat failed; retrying")
        return True
