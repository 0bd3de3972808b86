"""The reconciler tells a person what waits for them (reconciler/notify.py, issue 48 item 5): one signed,
Slack-compatible POST per held call, quarantined intent and attention, to a real HTTP receiver on loopback; a POST
not taken is tried again later and delivered once; nothing is sent twice for one item; no token is ever in it."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ledger import lifecycle
from ledger.db import open_ledger, transaction
from ledger.queries import PAYOUT_TOOL
from reconciler.notify import FIRST_RETRY_MS, Notifier
from tests.ledger.helpers import put_intent

SECRET = "notify-secret-0123456789"
M = "acc_DEMO000001"


class Receiver:
    """A real HTTP server on 127.0.0.1 that keeps what it is sent and answers `answers` in turn (then 200)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/interlock"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


@pytest.fixture
def waiting(tmp_path: Path) -> sqlite3.Connection:
    """A ledger with one call held, one intent quarantined and one payout the bank reversed (an attention)."""
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    put_intent(conn, "H" * 32, "HELD", amount=400_000, subject="pay_T0001", now=1_000)
    put_intent(conn, "Q" * 32, "QUARANTINED", amount=7_000, subject="pay_T0002", now=2_000)
    put_intent(conn, "P" * 32, "APPLIED", amount=48_000, tool=PAYOUT_TOOL, subject="fa_P0000000001", now=3_000)
    with transaction(conn):
        for status in ("processed", "reversed"):
            entity = {"id": "pout_P1", "entity": "payout", "status": status, "amount": 48_000, "currency": "INR"}
            lifecycle.observe(conn, merchant_id=M, sik="P" * 32, tool=PAYOUT_TOOL, entity_id="pout_P1", status=status,
                              entity=entity, source=lifecycle.WEBHOOK, ref=None, now=4_000, next_poll_at=5_000,
                              actor="test")  # fmt: skip
    return conn


def test_each_item_is_posted_once_signed_and_slack_compatible(receiver: Receiver, waiting: sqlite3.Connection) -> None:
    notifier = Notifier(ledger=waiting, url=receiver.url, secret=SECRET, clock=lambda: 10_000)
    assert notifier.step() == 3
    assert notifier.step() == 0 and len(receiver.received) == 3  # each item once
    bodies = {b["interlock"]["kind"]: b for b in receiver.bodies()}
    assert set(bodies) == {"held", "quarantined", "attention"}
    assert "HELD for an approver" in bodies["held"]["text"] and "4,000.00 INR" in bodies["held"]["text"]
    assert "QUARANTINED" in bodies["quarantined"]["text"]
    assert bodies["attention"]["interlock"]["status"] == "reversed" and "pout_P1" in bodies["attention"]["text"]
    for headers, body in receiver.received:
        t, v1 = (part.split("=", 1)[1] for part in headers["x-interlock-signature"].split(","))
        expected = hmac.new(SECRET.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(v1, expected)
        assert headers["content-type"] == "application/json" and headers["x-interlock-notification"]
        # It says what to look at, never how to act on it: no secret of any kind.
        assert SECRET.encode() not in body and b"token" not in body.lower() and b"secret" not in body.lower()


def test_a_post_not_taken_is_tried_again_later_and_delivered_once(
    receiver: Receiver, waiting: sqlite3.Connection,
) -> None:
    now = {"ms": 10_000}
    notifier = Notifier(ledger=waiting, url=receiver.url, secret=SECRET, clock=lambda: now["ms"])
    receiver.answers = [500, 503, 500]
    assert notifier.step() == 0 and len(receiver.received) == 3
    assert notifier.step() == 0 and len(receiver.received) == 3  # not due yet: nothing is hammered
    now["ms"] += FIRST_RETRY_MS
    assert notifier.step() == 3 and len(receiver.received) == 6
    assert len({h["x-interlock-notification"] for h, _ in receiver.received}) == 3  # the same three items
    now["ms"] += 10 * FIRST_RETRY_MS
    assert notifier.step() == 0 and len(receiver.received) == 6


def test_a_call_held_again_after_its_release_is_a_new_item(receiver: Receiver, waiting: sqlite3.Connection) -> None:
    notifier = Notifier(ledger=waiting, url=receiver.url, secret=SECRET, clock=lambda: 10_000)
    notifier.step()
    with transaction(waiting):
        waiting.execute("UPDATE intents SET updated_at = 20000 WHERE sik = ?", ("H" * 32,))  # held again, later
    assert notifier.step() == 1
    again = receiver.bodies()[-1]["interlock"]
    assert (again["kind"], again["sik"], again["since_ms"]) == ("held", "H" * 32, 20_000)


def test_no_receiver_is_tried_again_and_an_unsigned_setting_is_refused(waiting: sqlite3.Connection) -> None:
    from interlock.config import load_settings
    from interlock.errors import ConfigError

    notifier = Notifier(ledger=waiting, url="http://127.0.0.1:9/none", secret=SECRET, clock=lambda: 10_000)
    assert notifier.step() == 0 and notifier.counts["failed"] == 3
    row = waiting.execute("SELECT attempts, last_error FROM notifications LIMIT 1").fetchone()
    assert row[0] == 1 and "ConnectError" in row[1]
    with pytest.raises(ConfigError, match="INTERLOCK_NOTIFY_SECRET"):
        load_settings(notify_url="https://hooks.example.com/x")
