"""Every failure lands in one of REJECTED / AMBIGUOUS / NOT_SENT, per sandbox fault, and nothing retries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from rails.razorpay import RailError, RailErrorKind, RazorpayClient
from rails.wire import Answer, Lost
from sandbox.testing import SandboxProcess, free_port, wait_for


def refund_for(client: RazorpayClient, payment_id: str, sik: str) -> object:
    return client.create_refund(
        payment_id, 500, notes={"interlock_sik": sik}, receipt="ilk_" + sik, idempotency_key="ilk_" + sik
    )


def kind_of(call: object) -> RailErrorKind:
    with pytest.raises(RailError) as caught:
        call()  # type: ignore[operator]
    return caught.value.kind


@pytest.mark.parametrize("html", [0, 1])
def test_ambiguous_504_is_ambiguous_and_the_refund_exists(rail: SandboxProcess, client, payment, sik, html: int):
    payment_id = payment()
    rail.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": html}}])
    with pytest.raises(RailError) as caught:
        refund_for(client, payment_id, sik)
    assert caught.value.kind is RailErrorKind.AMBIGUOUS and caught.value.http_status == 504
    assert rail.count_stamped(sik) == 1


def test_fail_504_is_ambiguous_sent_once_and_nothing_exists(rail: SandboxProcess, client, payment, sik):
    payment_id = payment()
    rail.set_faults([{"name": "fail_504", "rate": 1.0}])
    assert kind_of(lambda: refund_for(client, payment_id, sik)) is RailErrorKind.AMBIGUOUS
    assert rail.count_stamped(sik) == 0
    # No retries inside the client (I3): the rail saw exactly one request.
    fired = [e for e in rail.journal()["events"] if e["kind"] == "fault_fail_504" and sik in str(e["detail"])]
    assert len(fired) == 1


def test_slow_times_out_as_ambiguous_and_the_refund_lands_later(rail: SandboxProcess, payment, sik):
    payment_id = payment()
    with rail.slow_held():  # not answered before the client gives up, however late its timer fires
        with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=250) as impatient:
            assert kind_of(lambda: refund_for(impatient, payment_id, sik)) is RailErrorKind.AMBIGUOUS
        wait_for(lambda: rail.health()["slow_waiting"] == 1, timeout=60)
    wait_for(lambda: rail.count_stamped(sik) == 1, timeout=60)


def test_in_progress_409_is_ambiguous(rail: SandboxProcess, client, payment, sik):
    payment_id = payment()
    with rail.slow_held():  # the first request is held until the second has been answered
        with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=100) as impatient:
            assert kind_of(lambda: refund_for(impatient, payment_id, sik)) is RailErrorKind.AMBIGUOUS
        wait_for(lambda: "ilk_" + sik in rail.health()["in_progress"], timeout=60)
        with pytest.raises(RailError) as caught:
            refund_for(client, payment_id, sik)
    assert caught.value.kind is RailErrorKind.AMBIGUOUS and caught.value.http_status == 409
    wait_for(lambda: rail.count_stamped(sik) == 1, timeout=60)


def test_dup_response_returns_a_refund_without_our_stamp(rail: SandboxProcess, client, payment, sik):
    payment_id = payment()
    client.create_refund(payment_id, 100, notes={"interlock_sik": "SOMEONEELSE"}, receipt=None, idempotency_key=None)
    rail.set_faults([{"name": "dup_response", "rate": 1.0}])
    answered = refund_for(client, payment_id, sik)
    assert not answered.carries_stamp(sik)  # type: ignore[attr-defined]  # the rail worker must say UNKNOWN
    assert rail.count_stamped(sik) == 1


def test_partition_fails_reads_and_money_as_ambiguous(rail: SandboxProcess, client, payment, sik):
    payment_id = payment()
    rail.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 30_000}}])
    assert kind_of(lambda: client.fetch_payment(payment_id)) is RailErrorKind.AMBIGUOUS
    assert kind_of(lambda: client.list_refunds_for_payment(payment_id)) is RailErrorKind.AMBIGUOUS
    assert kind_of(lambda: refund_for(client, payment_id, sik)) is RailErrorKind.AMBIGUOUS
    assert rail.count_stamped(sik) == 0


def test_replica_lag_hides_the_fresh_refund_from_the_client(rail: SandboxProcess, client, payment, sik):
    payment_id = payment()
    # A replica further behind than this test runs: the refund is still young to it when the client looks.
    rail.set_faults([{"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 600_000}}])
    made = refund_for(client, payment_id, sik)
    assert client.list_refunds_for_payment(payment_id).items == []
    with pytest.raises(RailError) as caught:
        client.fetch_refund(made.id)  # type: ignore[attr-defined]
    assert caught.value.not_found
    rail.clear_faults()  # the replica catches up
    assert [r.id for r in client.list_refunds_for_payment(payment_id).items] == [made.id]  # type: ignore[attr-defined]


def test_deep_page_needs_paging_to_find_ours(rail: SandboxProcess, client, payment, sik):
    payment_id = payment(100_000, prior_refunds=100)
    made = refund_for(client, payment_id, sik)
    rail.set_faults([{"name": "deep_page", "rate": 1.0}])
    first = client.list_refunds_for_payment(payment_id, count=100)
    assert not first.exhausted and made.id not in [r.id for r in first.items]  # type: ignore[attr-defined]
    second = client.list_refunds_for_payment(payment_id, count=100, skip=100)
    assert second.exhausted and [r.id for r in second.items] == [made.id]  # type: ignore[attr-defined]


def test_nothing_listening_is_not_sent():
    with RazorpayClient(f"http://127.0.0.1:{free_port()}", "k", "s", timeout_ms=1000) as client:
        assert kind_of(lambda: client.create_refund("pay_X", 100, notes=None, receipt=None, idempotency_key=None)) is (
            RailErrorKind.NOT_SENT
        )
        assert kind_of(client.fetch_balance) is RailErrorKind.NOT_SENT


# Pure unit tests of the classifier for bodies the sandbox never sends (a proxy's pages, garbage 2xx).


class ScriptedWire:
    """The wire's place in the client, answering every exchange from *answer* (pure classifier tests only)."""

    def __init__(self, answer: Callable[[str, str], Answer]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    def exchange(self, method: str, path: str, **_: Any) -> Answer:
        self.calls.append((method, path))
        return self.answer(method, path)

    def close(self) -> None:
        pass


def scripted(status: int, content: bytes, content_type: str = "application/json") -> RazorpayClient:
    wire = ScriptedWire(lambda method, path: Answer(status, {"content-type": content_type}, content))
    return RazorpayClient("http://rail.invalid", "k", "s", wire=wire)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "status, content, content_type, kind",
    [
        (200, b"<html>ok</html>", "text/html", RailErrorKind.AMBIGUOUS),
        (200, b'{"id": 12}', "application/json", RailErrorKind.AMBIGUOUS),
        (502, b'{"error": {"code": "SERVER_ERROR", "description": "x"}}', "application/json", RailErrorKind.AMBIGUOUS),
        (404, b"<html>Not Found</html>", "text/html", RailErrorKind.AMBIGUOUS),
        (
            408,
            b'{"error": {"code": "BAD_REQUEST_ERROR", "description": "t"}}',
            "application/json",
            RailErrorKind.AMBIGUOUS,
        ),
        (302, b"", "text/html", RailErrorKind.AMBIGUOUS),
        (
            400,
            b'{"error": {"code": "BAD_REQUEST_ERROR", "description": "no"}}',
            "application/json",
            RailErrorKind.REJECTED,
        ),
        (  # rate limited (SPEC §18): the rail decided nothing, so it is no refusal; a list read settles it
            429,
            b'{"error": {"code": "BAD_REQUEST_ERROR", "description": "slow down"}}',
            "application/json",
            RailErrorKind.AMBIGUOUS,
        ),
    ],
)
def test_classifier_on_unusual_answers(status: int, content: bytes, content_type: str, kind: RailErrorKind):
    with scripted(status, content, content_type) as client:
        assert (
            kind_of(lambda: client.create_refund("pay_X", 100, notes=None, receipt=None, idempotency_key=None)) is kind
        )


def test_a_rejection_without_field_is_still_a_rejection():
    with scripted(
        400, b'{"error": {"code": "BAD_REQUEST_ERROR", "description": "The id provided does not exist"}}'
    ) as c:
        with pytest.raises(RailError) as caught:
            c.fetch_payment("pay_X")
    assert caught.value.not_found and caught.value.field is None


def test_a_lost_answer_is_ambiguous_and_not_retried():
    def reset(method: str, path: str) -> Answer:
        raise Lost("ConnectionResetError: connection reset by peer")

    wire = ScriptedWire(reset)
    with RazorpayClient("http://rail.invalid", "k", "s", wire=wire) as client:  # type: ignore[arg-type]
        assert kind_of(client.fetch_balance) is RailErrorKind.AMBIGUOUS
    assert wire.calls == [("GET", "/v1/balance")]


def test_a_hanging_partition_times_out_as_ambiguous(rail: SandboxProcess, payment, sik):
    payment_id = payment()
    rail.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 600, "mode": "hang"}}])
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=200) as impatient:
        assert kind_of(lambda: refund_for(impatient, payment_id, sik)) is RailErrorKind.AMBIGUOUS
    rail.set_faults([])
    assert rail.count_stamped(sik) == 0
