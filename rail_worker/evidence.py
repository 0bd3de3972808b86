"""The rail answers this worker holds but has not made durable, and the stop they put on sending (ADR 0005).

The rail's answer to a call that left is the only first-hand evidence of what happened. A write of it that fails
(SQLITE_FULL, busy past the timeout, an I/O error, the writer's batch rolled back) is tried again until it
commits, fenced or not, and never given up: the reconciler and a standby's boot may act on its absence from
`abandon_after` (the attempt's row lease plus the call's total deadline) plus RECONCILE_MIN_DELAY_MS on, and they
act on it for as long as the intent is unsettled. From the first failed write until the answer is on disk the
worker sends nothing new (`Unrecorded` closes the send window of every call), says so at CRITICAL, and says
again when that bound passes. See ADR 0005 for why it is safe past the bound (the entity carries our stamp).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

Key = tuple[str, str, int]  # (merchant_id, sik, attempt_seq)


class Unrecorded:
    """Answers held in memory only. `is_set()` is True while any is held: no request may leave then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Key, dict[str, Any]] = {}

    def hold(self, key: Key, summary: dict[str, Any]) -> tuple[bool, bool]:
        """(changed, new): whether what is held for *key* changed, and whether *key* was not held before."""
        with self._lock:
            before = self._held.get(key)
            self._held[key] = summary
            return before != summary, before is None

    def release(self, key: Key) -> bool:
        """True when *key* was held."""
        with self._lock:
            return self._held.pop(key, None) is not None

    def is_set(self) -> bool:
        with self._lock:
            return bool(self._held)

    def held(self) -> list[dict[str, Any]]:
        """What is held, for the log at shutdown and for status."""
        with self._lock:
            return [{"merchant_id": k[0], "sik": k[1], "attempt_seq": k[2], **v} for k, v in self._held.items()]


class SendStop:
    """The one "no request may leave" signal the send window checks: the lease is lost, or an answer is held."""

    def __init__(self, lease_lost: threading.Event, unrecorded: Unrecorded) -> None:
        self.lease_lost = lease_lost
        self.unrecorded = unrecorded

    def is_set(self) -> bool:
        return self.lease_lost.is_set() or self.unrecorded.is_set()


def evidence_bound_ms(row_lease_expires_at: int, rail_timeout_ms: int, reconcile_min_delay_ms: int) -> int:
    """The first instant anyone may act on the absence of this attempt's answer: nobody treats the attempt as
    abandoned before its row lease plus the call's total deadline (ledger.intents.abandon_after), and the reconciler
    reads the rail no earlier than that plus its minimum delay. The answer must be durable by then."""
    return row_lease_expires_at + rail_timeout_ms + reconcile_min_delay_ms
