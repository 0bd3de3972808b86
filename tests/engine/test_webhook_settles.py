"""A signed webhook settles an ambiguous refund (issue 27, item 2; ADR 0027), as real processes: the sandbox rail
delivers Razorpay-format webhooks to the real receiver, which stores them in its inbox; the reconciler reads the
inbox and settles the intent from the stamped entity, without waiting for a list read.

The list reader's min delay is set far beyond the test's wait, so an APPLIED here can only have come from the
webhook (the transition says which), and a forged or foreign event is seen to change nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from interlock.ports import free_port, port_in_use
from ledger import webhook_inbox
from sandbox.testing import SandboxProcess, start_sandbox
from tests.engine.conftest import Engine
from tests.engine.test_time_to_definite import AMBIGUOUS_504, transitions
from tests.procs import wait_until

SECRET = "whsec_engine_test_0123456789"
# The list reader would look only after this long: far past the test's own wait.
SETTINGS = {"INTERLOCK_RECONCILE_MIN_DELAY_MS": "600000", "INTERLOCK_WEBHOOK_SECRETS": SECRET}


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data = tmp_path_factory.mktemp("receiver")
    inbox, port = data / "webhooks.sqlite3", free_port()
    env = {**os.environ, "INTERLOCK_WEBHOOK_SECRETS": SECRET, "INTERLOCK_WEBHOOK_INBOX": str(inbox)}
    with (data / "receiver.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "interlock.cli", "webhooks", "--port", str(port)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until(lambda: port_in_use(port), timeout=30, what="the webhook receiver to listen")
        yield f"http://127.0.0.1:{port}/webhooks/razorpay", inbox
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def rail_sandbox(tmp_path_factory: pytest.TempPathFactory, receiver: tuple[str, Path]) -> Iterator[SandboxProcess]:
    """This module's sandbox delivers its webhooks to the receiver above."""
    url, _ = receiver
    env = {"INTERLOCK_SANDBOX_WEBHOOK_URL": url, "INTERLOCK_WEBHOOK_SECRETS": SECRET}
    with start_sandbox(tmp_path_factory.mktemp("rail"), env=env) as rail:
        yield rail


@pytest.fixture
def engine(engine_factory: Callable[..., Engine], receiver: tuple[str, Path]) -> Engine:
    return engine_factory(env={**SETTINGS, "INTERLOCK_WEBHOOK_INBOX": str(receiver[1])})


def applied_by(engine: Engine, sik: str) -> str:
    conn = engine.ledger()
    try:
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq").fetchall()
    finally:
        conn.close()
    return next(p["event"] for p in map(lambda r: json.loads(r[0]), rows) if p["sik"] == sik and p["to"] == "APPLIED")


def test_an_ambiguous_refund_is_settled_by_its_webhook(engine: Engine) -> None:
    engine.rail.set_faults(AMBIGUOUS_504)
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 10000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.clear_faults()

    intent = engine.settle(outcome.sik, {"APPLIED"}, timeout_s=60)
    assert [to for _, to in transitions(engine, outcome.sik)] == ["AUTHORIZED", "IN_FLIGHT", "UNKNOWN", "APPLIED"]
    assert applied_by(engine, outcome.sik) == "WEBHOOK_APPLIED"
    assert intent.attempt_seq == 1 and engine.rail.count_stamped(outcome.sik) == 1
    assert intent.rail_entity_id is not None and intent.rail_entity_id.startswith("rfnd_")


def post(url: str, body: bytes, *, secret: str = SECRET, event_id: str) -> int:
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return httpx.post(url, content=body, headers={"X-Razorpay-Signature": signature, "x-razorpay-event-id": event_id,
                                                  "Content-Type": "application/json"}, timeout=10).status_code


def test_forged_and_foreign_webhooks_change_nothing(engine: Engine, receiver: tuple[str, Path]) -> None:
    url, inbox_path = receiver
    engine.rail.set_faults([{"name": "fail_504", "rate": 1.0}])  # answered 504, applied nothing: no real webhook
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 20000}))
    engine.rail.clear_faults()
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    other_payment = engine.payment()
    entity = {"id": "rfnd_Forged00000001", "entity": "refund", "amount": 20000, "currency": "INR",
              "payment_id": other_payment, "status": "processed", "notes": {"interlock_sik": outcome.sik}}  # fmt: skip
    body = json.dumps({"entity": "event", "account_id": "acc_SandboxRail001", "event": "refund.processed",
                       "contains": ["refund"], "payload": {"refund": {"entity": entity}},
                       "created_at": 1_700_000_000}).encode()  # fmt: skip
    assert post(url, body, secret="not-the-secret-at-all", event_id="evt_forged1") == 401
    # Correctly signed, our stamp, but a refund of another payment than the intent's: a person decides.
    assert post(url, body, event_id="evt_otherterms") == 200
    intent = engine.settle(outcome.sik, {"QUARANTINED"}, timeout_s=60)
    assert intent.reason_code == "RAIL_TERMS_MISMATCH"
    assert engine.rail.count_stamped(outcome.sik) == 0, "nothing was paid for it"
    conn = webhook_inbox.open_inbox(inbox_path)
    try:
        assert webhook_inbox.refusals(conn).get("signature_mismatch", 0) >= 1
        assert conn.execute("SELECT COUNT(*) FROM webhook_events WHERE event_id = 'evt_forged1'").fetchone()[0] == 0
    finally:
        conn.close()
