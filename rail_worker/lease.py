"""Boot and the singleton lease (SPEC §8 step 1).

Take the lease (refuse while another owner's heartbeat is fresh; take over with epoch + 1 when it is
stale), verify the audit chain (refuse to start on a break), then move every IN_FLIGHT row written
under an earlier epoch to UNKNOWN (LEASE_EXPIRED) — its call may or may not have reached the rail,
so only the reconciler may say which.
"""

from __future__ import annotations

import logging
import threading

from interlock.clock import now_ms
from interlock.errors import AuditChainBroken, StaleLease
from ledger import audit, intents, leases
from ledger.db import open_ledger, transaction
from ledger.states import Event, State
from rail_worker.runtime import RailRuntime

logger = logging.getLogger(__name__)


def boot(rt: RailRuntime) -> list[tuple[str, str]]:
    """Take the lease and recover; returns AUTHORIZED intents (merchant_id, sik) that need executing."""
    bad = audit.verify_chain(rt.ledger)
    if bad is not None:
        raise AuditChainBroken(bad)
    ttl = rt.settings.lease_ttl_ms
    with transaction(rt.ledger):
        rt.lease = leases.acquire(rt.ledger, leases.RAIL_WORKER_LEASE, rt.owner, now=now_ms(), ttl_ms=ttl)
    logger.info("rail worker %s holds the lease at epoch %d", rt.owner, rt.lease.epoch)
    expired = rt.ledger.execute(
        "SELECT merchant_id, sik FROM intents WHERE state = ? AND COALESCE(lease_epoch, 0) < ?",
        (State.IN_FLIGHT.value, rt.lease.epoch),
    ).fetchall()
    for row in expired:
        with transaction(rt.ledger):
            intents.transition(rt.ledger, row["merchant_id"], row["sik"], Event.LEASE_EXPIRED, now=now_ms(),
                               detail={"recovered_by_epoch": rt.lease.epoch}, actor=rt.owner)  # fmt: skip
        rt.hint_reconciler(row["merchant_id"], row["sik"])
        logger.warning("intent %s was IN_FLIGHT under an earlier epoch: now UNKNOWN for the reconciler", row["sik"])
    stranded = rt.ledger.execute(
        "SELECT merchant_id, sik FROM intents WHERE state = ? ORDER BY updated_at", (State.AUTHORIZED.value,)
    ).fetchall()
    return [(r["merchant_id"], r["sik"]) for r in stranded]


class Heartbeat(threading.Thread):
    """Extends the lease every ttl/3 on its own connection; on losing it, stops the worker at once."""

    def __init__(self, rt: RailRuntime, on_lost: threading.Event) -> None:
        super().__init__(name="lease-heartbeat", daemon=True)
        self.rt = rt
        self.on_lost = on_lost
        self.stopping = threading.Event()

    def run(self) -> None:
        conn = open_ledger(self.rt.ledger_path)  # its own connection: sqlite3 connections are not shared
        ttl = self.rt.settings.lease_ttl_ms
        lease = self.rt.current_lease()
        while not self.stopping.wait(ttl / 3000):
            try:
                with transaction(conn):
                    lease = leases.heartbeat(conn, lease, now=now_ms(), ttl_ms=ttl)
            except StaleLease:
                logger.error("lease lost: epoch %d was superseded; this rail worker stops now", lease.epoch)
                self.on_lost.set()
                return
            except Exception:
                logger.exception("lease heartbeat failed; retrying")
        conn.close()
