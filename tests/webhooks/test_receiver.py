"""The webhook receiver (SPEC §17): what it accepts, what it refuses and with which status, and that an accepted
event is in the inbox before it is acknowledged."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from interlock.errors import ConfigError
from ledger import webhook_inbox
from webhooks.receiver import MAX_BODY_BYTES, PATH, RateLimit, Receiver, create_app
from webhooks.signature import parse_secrets, sign, verify

OLD, NEW = "old-secret-0123456789abcdef", "new-secret-0123456789abcdef"


def event(name: str = "refund.processed", **extra: object) -> bytes:
    body = {"entity": "event", "account_id": "acc_M00", "event": name, "contains": ["refund"],
            "payload": {"refund": {"entity": {"id": "rfnd_1", "notes": {"interlock_sik": "S1"}}}},
            "created_at": 1_900_000_000, **extra}  # fmt: skip
    return json.dumps(body).encode()


def headers(body: bytes, secret: str = NEW, event_id: str | None = "evt_1") -> dict[str, str]:
    out = {"X-Razorpay-Signature": sign(body, secret), "Content-Type": "application/json"}
    if event_id is not None:
        out["x-razorpay-event-id"] = event_id
    return out


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    return tmp_path / "webhooks.sqlite3"


@pytest.fixture
def receiver(inbox: Path) -> Iterator[Receiver]:
    r = Receiver(inbox, (NEW, OLD), rate_per_second=1_000)
    yield r
    r.close()


@pytest.fixture
def client(receiver: Receiver) -> TestClient:
    return TestClient(create_app(receiver))


def rows(inbox: Path) -> list[tuple[str, str, int, bytes]]:
    conn = sqlite3.connect(inbox)
    try:
        return conn.execute("SELECT event_id, event, deliveries, body FROM webhook_events ORDER BY event_id").fetchall()
    finally:
        conn.close()


def refusals(inbox: Path) -> dict[str, int]:
    conn = webhook_inbox.open_inbox(inbox)
    try:
        return webhook_inbox.refusals(conn)
    finally:
        conn.close()


def test_a_signed_event_is_stored_with_its_raw_bytes_before_it_is_acknowledged(client: TestClient,
                                                                                 inbox: Path) -> None:  # fmt: skip
    body = event()
    answer = client.post(PATH, content=body, headers=headers(body))
    assert answer.status_code == 200 and answer.json() == {"status": "accepted", "event_id": "evt_1"}
    assert rows(inbox) == [("evt_1", "refund.processed", 1, body)]


def test_a_second_delivery_of_an_event_is_acknowledged_and_only_counted(client: TestClient, inbox: Path) -> None:
    body = event()
    client.post(PATH, content=body, headers=headers(body))
    again = client.post(PATH, content=body, headers=headers(body))
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert [(r[0], r[2]) for r in rows(inbox)] == [("evt_1", 2)]
    conn = webhook_inbox.open_inbox(inbox)
    assert webhook_inbox.counts(conn) == {"events": 1, "duplicates": 1, "unprocessed": 1}
    conn.close()


def test_an_event_signed_with_the_previous_secret_is_accepted_while_both_are_configured(client: TestClient) -> None:
    body = event()
    assert client.post(PATH, content=body, headers=headers(body, secret=OLD)).status_code == 200


@pytest.mark.parametrize("case", ["forged", "missing", "other_body"])
def test_a_delivery_without_a_signature_that_verifies_is_refused_401_and_records_nothing(
    client: TestClient, inbox: Path, case: str
) -> None:
    body = event()
    sent = headers(body, secret="not-the-secret-0123456789")
    if case == "missing":
        del sent["X-Razorpay-Signature"]
    if case == "other_body":  # a genuine signature over another body (a replayed header)
        sent = headers(event("refund.failed"))
    answer = client.post(PATH, content=body, headers=sent)
    assert answer.status_code == 401
    assert rows(inbox) == []
    assert refusals(inbox) == {"signature_missing" if case == "missing" else "signature_mismatch": 1}
    # The detail says what is wrong: no header is not a wrong signature.
    detail = ("the X-Razorpay-Signature header is missing (or empty)" if case == "missing"
              else "X-Razorpay-Signature does not verify with any configured secret")  # fmt: skip
    assert answer.json()["detail"] == detail


def test_a_delivery_with_an_empty_signature_header_is_refused_as_missing(client: TestClient, inbox: Path) -> None:
    body = event()
    answer = client.post(PATH, content=body, headers={**headers(body), "X-Razorpay-Signature": ""})
    assert answer.status_code == 401 and answer.json()["error"] == "signature_missing"
    assert "header is missing" in answer.json()["detail"]
    assert rows(inbox) == [] and refusals(inbox) == {"signature_missing": 1}


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "malformed_event"),
    (json.dumps({"entity": "payment", "event": "x", "payload": {}}).encode(), "malformed_event"),
    (json.dumps({"entity": "event", "payload": {}}).encode(), "malformed_event"),
    (b'{"entity": "event", "event": "refund.processed", "event": "refund.failed", "payload": {}}', "malformed_event"),
    (b"\xff\xfe", "malformed_event"),
])  # fmt: skip
def test_a_signed_body_that_is_not_a_razorpay_event_is_refused_400(client: TestClient, inbox: Path, body: bytes,
                                                                   reason: str) -> None:  # fmt: skip
    answer = client.post(PATH, content=body, headers=headers(body))
    assert answer.status_code == 400 and answer.json()["error"] == reason
    assert rows(inbox) == []


def test_a_signed_event_without_its_event_id_is_refused_400(client: TestClient, inbox: Path) -> None:
    body = event()
    assert client.post(PATH, content=body, headers=headers(body, event_id=None)).status_code == 400
    assert client.post(PATH, content=body, headers=headers(body, event_id="a b")).status_code == 400
    assert rows(inbox) == [] and refusals(inbox) == {"event_id_missing": 2}


def test_a_body_over_one_mebibyte_is_refused_413_without_being_stored(client: TestClient, inbox: Path) -> None:
    body = event(padding="x" * MAX_BODY_BYTES)
    assert client.post(PATH, content=body, headers=headers(body)).status_code == 413
    # Without a Content-Length (chunked): the read stops at the bound all the same.
    chunks = (body[i:i + 65_536] for i in range(0, len(body), 65_536))
    assert client.post(PATH, content=chunks, headers=headers(body)).status_code == 413
    assert rows(inbox) == [] and refusals(inbox) == {"body_too_large": 2}


def test_deliveries_over_the_rate_are_refused_429_until_the_bucket_refills(inbox: Path) -> None:
    now = [100.0]
    receiver = Receiver(inbox, (NEW,), rate_per_second=3)
    receiver.rate = RateLimit(3, clock=lambda: now[0])
    client = TestClient(create_app(receiver))

    def deliver(i: int) -> int:
        body = event(n=i)
        return client.post(PATH, content=body, headers=headers(body, event_id=f"evt_{i}")).status_code

    assert [deliver(i) for i in range(5)] == [200, 200, 200, 429, 429]
    now[0] += 0.34  # a third of a second later: one more
    assert [deliver(i) for i in range(5, 7)] == [200, 429]
    receiver.close()
    assert receiver.refused["rate_limited"] == 3
    assert len(rows(inbox)) == 4


def test_an_event_the_inbox_cannot_store_is_answered_503_so_that_razorpay_sends_it_again(
    receiver: Receiver, client: TestClient, inbox: Path
) -> None:
    receiver._conn.close()  # the file is gone from under the receiver, as on a failed disk
    body = event()
    answer = client.post(PATH, content=body, headers=headers(body))
    assert answer.status_code == 503 and answer.headers["Retry-After"]
    receiver._conn = webhook_inbox.open_inbox(inbox)
    assert rows(inbox) == []


def test_signatures_are_checked_against_every_configured_secret() -> None:
    body = b'{"x": 1}'
    assert verify(body, sign(body, OLD), (NEW, OLD)) and verify(body, sign(body, NEW).upper(), (NEW, OLD))
    assert not verify(body, sign(body, OLD), (NEW,)) and not verify(body, None, (NEW,))
    assert not verify(body, "zz" * 32, (NEW, OLD))


@pytest.mark.parametrize(("value", "says"), [(None, "is not set"), ("", "is not set"), (f"{NEW},,{OLD}", "empty"),
                                             ("short", "shorter than 16")])  # fmt: skip
def test_the_secrets_setting_is_refused_with_a_message_that_names_it(value: str | None, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        parse_secrets(value)
    assert raised.value.variable == "INTERLOCK_WEBHOOK_SECRETS"
    assert parse_secrets(f" {NEW} , {OLD}") == (NEW, OLD)
