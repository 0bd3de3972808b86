"""One total deadline per REST call, enforced against a rail that trickles or never answers, and the send
window checked at the first byte (rails.deadline), against real local servers."""

from __future__ import annotations

import time

import pytest

from rails.deadline import SendWindowClosed, send_window
from rails.razorpay import RailError, RailErrorKind, RazorpayClient
from rails.wire import Wire, encode_json
from sandbox.testing import SandboxProcess
from tests.rails.stub_rail import StubRail

DEADLINE_MS = 600
LONG_BODY = b'{"pad": "' + b"x" * 400 + b'"}'  # at 200 ms a byte, far longer than the deadline


def refund(client: RazorpayClient, payment_id: str = "pay_STUB00000001", sik: str = "S" * 32) -> object:
    return client.create_refund(payment_id, 700, notes={"interlock_sik": sik}, receipt="ilk_" + sik,
                                idempotency_key="ilk_" + sik)  # fmt: skip


def failure(call: object) -> tuple[RailError, float]:
    started = time.monotonic()
    with pytest.raises(RailError) as caught:
        call()  # type: ignore[operator]
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize("mode", ["trickle_head", "trickle_body"])
def test_a_trickling_rail_cannot_outlive_the_total_deadline(mode: str) -> None:
    with StubRail(mode, body=LONG_BODY) as stub, RazorpayClient(stub.url, "k", "s", timeout_ms=DEADLINE_MS) as client:
        money, money_s = failure(lambda: refund(client))
        read, read_s = failure(lambda: client.fetch_payment("pay_STUB00000001"))
    # Each read gets a byte well within httpx's per-read timeout; only a total deadline ends the call.
    assert money.kind is RailErrorKind.AMBIGUOUS and read.kind is RailErrorKind.AMBIGUOUS
    assert money_s < 3 * DEADLINE_MS / 1000 and read_s < 3 * DEADLINE_MS / 1000


def test_a_rail_that_never_answers_is_ambiguous_within_the_deadline() -> None:
    with StubRail("silent") as stub, RazorpayClient(stub.url, "k", "s", timeout_ms=DEADLINE_MS) as client:
        error, elapsed = failure(lambda: refund(client))
        assert b"POST /v1/payments/pay_STUB00000001/refund" in stub.bytes_received()
    assert error.kind is RailErrorKind.AMBIGUOUS and elapsed < 3 * DEADLINE_MS / 1000


def test_a_closed_send_window_is_not_sent_and_no_byte_reaches_the_rail() -> None:
    with StubRail("answer") as stub, RazorpayClient(stub.url, "k", "s", timeout_ms=DEADLINE_MS) as client:
        with send_window(time.monotonic() - 0.001):
            error, _ = failure(lambda: refund(client))
        assert error.kind is RailErrorKind.NOT_SENT
        assert stub.bytes_received() == b""


def test_the_window_is_checked_at_the_first_write_after_connecting() -> None:
    # The wire alone, without the client's early check: the connection is made, then the first write is
    # refused, so the rail sees a connection that carried no byte; the next request connects afresh.
    with StubRail("answer") as stub:
        wire = Wire(stub.url, "k", "s", connect_timeout_s=1, user_agent="test")
        path, body = "/v1/payments/pay_STUB00000001/refund", encode_json({"amount": 500})
        with send_window(time.monotonic() - 0.001), pytest.raises(SendWindowClosed):
            wire.exchange("POST", path, body=body, deadline=time.monotonic() + 5)
        stub.wait_closed()
        assert stub.connections == 1 and stub.bytes_received() == b""
        with send_window(time.monotonic() + 60):
            assert wire.exchange("POST", path, body=body, deadline=time.monotonic() + 5).json() == {"ok": True}
        wire.close()
        assert stub.connections == 2 and b'{"amount":500}' in stub.bytes_received()


def test_an_open_send_window_lets_the_refund_through(rail: SandboxProcess, client: RazorpayClient, payment,
                                                     sik: str) -> None:  # fmt: skip
    payment_id = payment()
    with send_window(time.monotonic() + 60):
        made = refund(client, payment_id, sik)
    assert made.carries_stamp(sik) and rail.count_stamped(sik) == 1  # type: ignore[attr-defined]


def test_a_closed_send_window_leaves_nothing_on_the_sandbox(rail: SandboxProcess, client: RazorpayClient, payment,
                                                           sik: str) -> None:  # fmt: skip
    payment_id = payment()
    with send_window(time.monotonic() - 0.001):
        error, _ = failure(lambda: refund(client, payment_id, sik))
    assert error.kind is RailErrorKind.NOT_SENT
    # Outside the window the same client works: the refused call left no broken connection behind.
    assert client.fetch_payment(payment_id).amount == 100_000
    assert rail.count_stamped(sik) == 0
