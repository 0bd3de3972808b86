"""Tell a person what waits for them (issue 48 item 5): one signed POST, Slack-compatible, for each new held call,
quarantined intent and attention — instead of it waiting until someone happens to open the console.

Each reconciler step finds what waits (intents HELD or QUARANTINED, attentions nobody acknowledged) and records each
new item once in the ledger's `notifications` table, with the exact body it will send; then it POSTs what is due.
A receiver that answers 2xx has it (sent_at); any other answer, or none, is tried again later — 30 s, doubling, to an
hour — and after MAX_ATTEMPTS it is given up, logged, and left in the table. An item is one state of one intent: a
call held again after a release, or an attention raised again on changed money, is a new item. A crash between the
POST and recording it sends that item again; the `X-Interlock-Notification` header is the item's key, so a receiver
can drop a repeat.

The body is `{"text": ...}` (what Slack's incoming webhooks, and Mattermost's, show) with an `interlock` object of the
same facts. It is built from the ledger's own fields only — merchant, tool, amount, reason, the SIK — and carries no
token, no approver credential and no rail key: it says what to look at, never how to act on it. The signature is
`X-Interlock-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" under INTERLOCK_NOTIFY_SECRET>`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from interlock.clock import now_ms
from interlock.money import format_minor
from ledger import lifecycle
from ledger.db import transaction

logger = logging.getLogger(__name__)

FIRST_RETRY_MS = 30_000
MAX_RETRY_MS = 3_600_000
MAX_ATTEMPTS = 30  # about a day of tries at the longest interval
SENDS_PER_STEP = 20
TIMEOUT_S = 5.0

Post = Callable[[str, bytes, dict[str, str]], int]  # url, body, headers -> HTTP status (an exception: no answer)


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
        return client.post(url, content=body, headers=headers).status_code


def signature(secret: str, body: bytes, at_s: int) -> str:
    mac = hmac.new(secret.encode(), f"{at_s}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at_s},v1={mac}"


@dataclass
class Notifier:
    ledger: sqlite3.Connection
    url: str
    secret: str
    post: Post = _post
    clock: Callable[[], int] = now_ms
    counts: dict[str, int] = field(default_factory=lambda: {"sent": 0, "failed": 0, "given_up": 0})

    def step(self) -> int:
        """Record what newly waits for a person, then POST what is due; returns how many were delivered."""
        now = self.clock()
        with transaction(self.ledger) as conn:
            for key, kind, merchant_id, sik, body in self._waiting(conn):
                conn.execute(
                    """INSERT OR IGNORE INTO notifications (item_key, kind, merchant_id, sik, body_json, created_at,
                                                            next_try_at) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    (key, kind, merchant_id, sik, json.dumps(body, sort_keys=True), now, now),
                )  # fmt: skip
        due = self.ledger.execute(
            """SELECT item_key, body_json, attempts FROM notifications INDEXED BY notifications_due
               WHERE sent_at IS NULL AND given_up_at IS NULL AND next_try_at <= ? ORDER BY next_try_at LIMIT ?""",
            (now, SENDS_PER_STEP),
        ).fetchall()
        return sum(self._send(str(key), str(body), int(attempts)) for key, body, attempts in due)

    def _send(self, key: str, body: str, attempts: int) -> int:
        data = body.encode()
        headers = {"Content-Type": "application/json", "X-Interlock-Notification": key,
                   "X-Interlock-Signature": signature(self.secret, data, int(time.time()))}  # fmt: skip
        try:
            status: int | None = self.post(self.url, data, headers)
            error = None if 200 <= (status or 0) < 300 else f"HTTP {status}"
        except httpx.HTTPError as exc:
            status, error = None, f"{type(exc).__name__}: {exc}"[:300]
        now = self.clock()
        with transaction(self.ledger) as conn:
            if error is None:
                conn.execute("UPDATE notifications SET sent_at = ?, attempts = ? WHERE item_key = ?",
                             (now, attempts + 1, key))  # fmt: skip
                self.counts["sent"] += 1
                return 1
            tries = attempts + 1
            if tries >= MAX_ATTEMPTS:
                conn.execute("UPDATE notifications SET attempts = ?, given_up_at = ?, last_error = ? "
                             "WHERE item_key = ?", (tries, now, error, key))  # fmt: skip
                self.counts["given_up"] += 1
                logger.error("notification %s given up after %d tries (last: %s): nobody was told", key, tries, error)
                return 0
            wait = min(FIRST_RETRY_MS * 2 ** (tries - 1), MAX_RETRY_MS)
            conn.execute("UPDATE notifications SET attempts = ?, next_try_at = ?, last_error = ? WHERE item_key = ?",
                         (tries, now + wait, error, key))  # fmt: skip
        self.counts["failed"] += 1
        logger.warning("notification %s not delivered (%s); trying again in %d s", key, error, wait // 1000)
        return 0

    def _waiting(self, conn: sqlite3.Connection) -> list[tuple[str, str, str, str, dict[str, Any]]]:
        """(key, kind, merchant, sik, body) of every item waiting for a person now."""
        found = []
        rows = conn.execute("""SELECT state, merchant_id, sik, tool, amount_minor, currency, updated_at, agent_id
                               FROM intents WHERE state IN ('HELD', 'QUARANTINED')""").fetchall()
        for state, merchant_id, sik, tool, amount, currency, since, agent_id in rows:
            kind = "held" if state == "HELD" else "quarantined"
            what = (f"{tool} of {format_minor(int(amount), str(currency))} by {agent_id} is HELD for an approver "
                    f"(`interlock holds list`)" if kind == "held" else
                    f"{tool} of {format_minor(int(amount), str(currency))} by {agent_id} is QUARANTINED: whether money "
                    "moved needs a person (`interlock quarantine list`)")  # fmt: skip
            facts = {"kind": kind, "merchant_id": merchant_id, "sik": sik, "tool": tool, "amount_minor": int(amount),
                     "currency": currency, "agent_id": agent_id, "since_ms": int(since)}  # fmt: skip
            found.append((f"{kind}:{merchant_id}:{sik}:{since}", kind, str(merchant_id), str(sik),
                          {"text": f"Interlock, merchant {merchant_id}: {what}; sik {sik}", "interlock": facts}))
        for a in lifecycle.attentions_waiting(conn):
            version = a["raised_seq"] if a["raised_seq"] is not None else a["updated_at"]
            shown = ("merchant_id", "sik", "tool", "entity_id", "status", "attention")
            facts = {"kind": "attention", **{k: a[k] for k in shown}, "since_ms": int(a["updated_at"])}
            text = (f"Interlock, merchant {a['merchant_id']}: {a['attention']} — {a['tool']} {a['entity_id']} is "
                    f"{a['status']} at the rail (`interlock attention list`); sik {a['sik']}")  # fmt: skip
            found.append((f"attention:{a['merchant_id']}:{a['sik']}:{version}", "attention", str(a["merchant_id"]),
                          str(a["sik"]), {"text": text, "interlock": facts}))
        return found
