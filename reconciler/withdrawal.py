"""Withdrawal (issue 28 item 4; ADR 0028): a queued payout whose mandate is withdrawn is cancelled on the rail.

A payout the RazorpayX balance could not cover, made under a mandate with `queue_if_low_balance`, waits `queued`
on the rail — for months, until a top-up pays for it. It was authorised by the mandate in force when it was
admitted. When that mandate is no longer the one in force — replaced by a new version, expired, or without the
create_payout grant — a person has withdrawn what let it go, and the money must not leave on a top-up later.
Each shard's reconciler, beside following the lifecycle, cancels such payouts (`POST /v1/payouts/{id}/cancel`,
queued ones only), records the rail's answer as an observation of the payout's lifecycle (`cancelled`, which
raises PAYOUT_NOT_PAID for a person: the agent was told the payout was accepted) and audits each cancellation with
the reason (PAYOUT_CANCELLED). One the rail will not cancel — it started meanwhile, or the rail is unreachable —
is audited as PAYOUT_NOT_CANCELLED, counted, logged, and its lifecycle fetched again soon; a refusal is not tried
again while the payout stays in the status it was refused in (or until the reconciler restarts), an outage a minute
later. A withdrawn payout waiting `pending` (RazorpayX's
approval workflow) or `scheduled` cannot be cancelled through the API at all (SPEC §18): it is audited
PAYOUT_NOT_CANCELLED once, with what a person must do (reject it in the approval workflow, or cancel the schedule
on the dashboard), and not sent a cancel the rail would refuse. When a person approves it and the balance is short,
it moves on to `queued`, and then it is cancelled like any other (found by the simulator, seed 118).

It moves no money forward: a cancel only stops a payout that has not debited anything.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from interlock.clock import now_ms
from interlock.mandate import Mandate, MandateStore
from ledger import audit, lifecycle
from ledger.db import transaction
from ledger.queries import PAYOUT_TOOL
from rails.models import Payout
from rails.razorpay import RailError, RailErrorKind

logger = logging.getLogger(__name__)

CANCELLED, NOT_CANCELLED = "PAYOUT_CANCELLED", "PAYOUT_NOT_CANCELLED"
MANDATE_REPLACED, MANDATE_EXPIRED, GRANT_WITHDRAWN = "MANDATE_REPLACED", "MANDATE_EXPIRED", "GRANT_WITHDRAWN"
CANCELS_PER_STEP = 5  # the reconciler steps about once a second: within RazorpayX's 5-10 requests a second
SCAN_PAGE = 500
RETRY_MS = 60_000  # after the rail could not be reached, was rate limited or answered ambiguously
# Statuses a withdrawn payout may still leave from: queued is cancelled; the others only a person can stop.
WAITING = ("queued", "pending", "scheduled")
NOT_CANCELLABLE = {
    "pending": "it waits for approval on RazorpayX, which the API cannot cancel: reject it in the approval workflow",
    "scheduled": "it is scheduled on RazorpayX, which the API cannot cancel: cancel it on the dashboard",
}


class PayoutCanceller(Protocol):
    def cancel_payout(self, payout_id: str) -> Payout: ...


def withdrawn(mandate: Mandate | None, mandate_hash: str | None, now: int) -> str | None:
    """Why the mandate a payout was admitted under (by its hash) no longer lets it go; None while it does."""
    if mandate is None or mandate.grant(PAYOUT_TOOL) is None:
        return GRANT_WITHDRAWN
    if not mandate.is_active(now):
        return MANDATE_EXPIRED
    if mandate.mandate_hash != mandate_hash:
        return MANDATE_REPLACED
    return None


@dataclass
class PayoutWithdrawal:
    ledger: sqlite3.Connection
    rail: PayoutCanceller
    mandates: MandateStore
    owner: str
    clock: Callable[[], int] = now_ms
    counts: Counter[str] = field(default_factory=Counter)
    # (merchant, sik, reason, status) the rail refused, or could not be asked, in the status the ledger knew then
    _refused: set[tuple[str, str, str, str]] = field(default_factory=set)
    _retry_at: dict[tuple[str, str], int] = field(default_factory=dict)  # (merchant, sik) the rail did not answer

    def step(self) -> int:
        """Cancel the queued payouts whose mandate is withdrawn, at most CANCELS_PER_STEP (RazorpayX asks for 5-10
        requests a second); returns how many the rail cancelled. Every queued payout is looked at, in key order, so
        many legitimately queued ones never hide a withdrawn one."""
        now = self.clock()
        due: list[tuple[str, str, str, str, str, str | None]] = []
        after = ("", "")
        while len(due) < CANCELS_PER_STEP:
            rows = self.ledger.execute(
                f"""SELECT rs.merchant_id, rs.sik, rs.entity_id, rs.status, i.agent_id, i.mandate_hash
                    FROM rail_status rs JOIN intents i ON i.merchant_id = rs.merchant_id AND i.sik = rs.sik
                    WHERE rs.tool = ? AND rs.status IN ({", ".join("?" for _ in WAITING)}) AND rs.final = 0
                      AND (rs.merchant_id, rs.sik) > (?, ?)
                    ORDER BY rs.merchant_id, rs.sik LIMIT ?""",
                (PAYOUT_TOOL, *WAITING, *after, SCAN_PAGE),
            ).fetchall()  # fmt: skip
            for merchant_id, sik, entity_id, status, agent_id, mandate_hash in rows:
                reason = withdrawn(self.mandates.get(agent_id), mandate_hash, now)
                waiting = self._retry_at.get((merchant_id, sik), 0) > now
                if reason is None or (merchant_id, sik, reason, status) in self._refused or waiting:
                    continue
                if status in NOT_CANCELLABLE:
                    self._cannot_cancel(merchant_id, sik, entity_id, status, reason, mandate_hash,
                                        NOT_CANCELLABLE[status])  # fmt: skip
                else:
                    due.append((merchant_id, sik, entity_id, status, reason, mandate_hash))
            if len(rows) < SCAN_PAGE:
                break
            after = (rows[-1][0], rows[-1][1])
        return sum(self._cancel(*found) for found in due[:CANCELS_PER_STEP])

    def _cancel(self, merchant_id: str, sik: str, entity_id: str, status: str, reason: str,
                mandate_hash: str | None) -> int:  # fmt: skip
        try:
            payout = self.rail.cancel_payout(entity_id)
        except RailError as exc:
            # Only the rail's own refusal ("only queued payouts can be cancelled": it started meanwhile) ends the
            # tries; a 429, a 5xx, a timeout or no answer is tried again later.
            refused = exc.kind is RailErrorKind.REJECTED and exc.http_status != 429
            if refused:
                self._refused.add((merchant_id, sik, reason, status))
            else:
                self._retry_at[(merchant_id, sik)] = self.clock() + RETRY_MS
            self._not_cancelled(merchant_id, sik, entity_id, reason, mandate_hash, str(exc)[:500], refused=refused)
            return 0
        with transaction(self.ledger):
            now = self.clock()
            lifecycle.observe(self.ledger, merchant_id=merchant_id, sik=sik, tool=PAYOUT_TOOL, entity_id=payout.id,
                              status=payout.status, entity=dict(payout.raw), source=lifecycle.ANSWER, ref=None,
                              now=now, next_poll_at=now, actor=self.owner)  # fmt: skip
            audit.append(self.ledger, CANCELLED, {
                "merchant_id": merchant_id, "sik": sik, "rail_entity_id": payout.id, "reason": reason,
                "mandate_hash": mandate_hash, "status": payout.status, "actor": self.owner,
            }, now)  # fmt: skip
        self.counts["cancelled"] += 1
        logger.warning("queued payout %s of %s cancelled on the rail: %s", payout.id, sik, reason)
        return 1

    def _cannot_cancel(self, merchant_id: str, sik: str, entity_id: str, status: str, reason: str,
                       mandate_hash: str | None, why: str) -> None:  # fmt: skip
        """A withdrawn payout the API cannot cancel: said once per status, with what a person must do; no call is
        made."""
        self._refused.add((merchant_id, sik, reason, status))
        self._not_cancelled(merchant_id, sik, entity_id, reason, mandate_hash, why, refused=True)

    def _not_cancelled(self, merchant_id: str, sik: str, entity_id: str, reason: str, mandate_hash: str | None,
                       error: str, *, refused: bool) -> None:  # fmt: skip
        self.counts["not_cancelled"] += 1
        logger.error("withdrawn payout %s of %s was not cancelled (%s): %s", entity_id, sik, reason, error)
        with transaction(self.ledger):
            now = self.clock()
            audit.append(self.ledger, NOT_CANCELLED, {
                "merchant_id": merchant_id, "sik": sik, "rail_entity_id": entity_id, "reason": reason,
                "mandate_hash": mandate_hash, "error": error, "refused": refused, "actor": self.owner,
            }, now)  # fmt: skip
            # Whatever it is now (started, processed), the lifecycle should read it soon.
            lifecycle.schedule(self.ledger, merchant_id, sik, next_poll_at=now, polled=False)
