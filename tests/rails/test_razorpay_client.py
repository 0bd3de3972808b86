"""The Razorpay client against the real sandbox process: typed results, stamps sent verbatim, errors."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from interlock.config import load_settings
from interlock.errors import ConfigError, InvalidAmount, InvalidInput
from rails.models import Page, Refund
from rails.razorpay import RailError, RailErrorKind, RazorpayClient
from sandbox.testing import SandboxProcess


def stamped(client: RazorpayClient, payment_id: str, sik: str, amount: int | None = 500) -> Refund:
    return client.create_refund(
        payment_id, amount, notes={"interlock_sik": sik}, receipt="ilk_" + sik, idempotency_key="ilk_" + sik
    )


def test_fetch_payment_is_typed_and_reads_empty_notes_as_a_dict(client: RazorpayClient, payment: Callable[..., str]):
    payment_id = payment(20_000, amount_refunded=5000)
    fetched = client.fetch_payment(payment_id)
    assert (fetched.id, fetched.amount, fetched.amount_refunded, fetched.refundable) == (
        payment_id,
        20_000,
        5000,
        15_000,
    )
    assert (fetched.status, fetched.refund_status, fetched.currency) == ("captured", "partial", "INR")
    assert fetched.notes == {} and fetched.raw["notes"] == []


def test_create_refund_sends_exactly_the_callers_stamps(rail: SandboxProcess, client: RazorpayClient, payment, sik):
    payment_id = payment()
    made = stamped(client, payment_id, sik)
    assert made.carries_stamp(sik) and made.stamp_sik == sik and made.receipt == "ilk_" + sik
    assert made.id.startswith("rfnd_") and made.raw["entity"] == "refund"
    [entry] = [e for e in rail.entities("refund") if e["id"] == made.id]
    assert entry["request"]["body"] == {"amount": 500, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik}
    assert entry["request"]["headers"]["x-refund-idempotency"] == "ilk_" + sik


def test_client_adds_no_idempotency_of_its_own(rail: SandboxProcess, client: RazorpayClient, payment):
    payment_id = payment()
    made = client.create_refund(payment_id, 300, notes=None, receipt=None, idempotency_key=None)
    [entry] = [e for e in rail.entities("refund") if e["id"] == made.id]
    assert entry["request"]["body"] == {"amount": 300}
    assert "x-refund-idempotency" not in entry["request"]["headers"]
    assert made.notes == {} and made.stamp_sik is None


def test_retry_with_the_same_arguments_returns_the_same_refund(
    rail: SandboxProcess, client: RazorpayClient, payment, sik
):
    payment_id = payment()
    assert stamped(client, payment_id, sik).id == stamped(client, payment_id, sik).id
    assert rail.count_stamped(sik) == 1


def test_fetch_and_list_refunds(client: RazorpayClient, payment, sik):
    payment_id = payment(100_000, prior_refunds=3)
    made = stamped(client, payment_id, sik)
    assert client.fetch_refund(made.id) == made
    page = client.list_refunds_for_payment(payment_id, count=2)
    assert isinstance(page, Page) and len(page.items) == 2 and not page.exhausted
    assert page.items[0].id == made.id
    rest = client.list_refunds_for_payment(payment_id, count=2, skip=2)
    assert len(rest.items) == 2 and not rest.exhausted
    assert client.list_refunds_for_payment(payment_id, count=2, skip=4).exhausted
    assert made.id in [r.id for r in client.list_refunds(count=100).items]


def test_settlements_and_balance(rail: SandboxProcess, client: RazorpayClient, sik):
    rail.set_balance(500_000)
    made = client.create_instant_settlement(100_000, description="Daily payout", notes={"interlock_sik": sik})
    assert (made.amount_requested, made.fees, made.tax, made.amount_settled) == (100_000, 354, 54, 99_646)
    assert made.carries_stamp(sik) and made.id.startswith("setlod_")
    assert client.fetch_instant_settlement(made.id) == made
    assert client.list_instant_settlements(count=1).items == [made]
    assert client.fetch_balance().balance == 400_000
    full = client.create_instant_settlement(settle_full_balance=True, notes=None)
    assert full.amount_requested == 400_000 and full.settle_full_balance
    assert client.fetch_balance().balance == 0


def test_unknown_id_is_rejected_and_marked_not_found(client: RazorpayClient):
    with pytest.raises(RailError) as caught:
        client.fetch_payment("pay_DOESNOTEXIST")
    error = caught.value
    assert (error.kind, error.http_status, error.code, error.not_found) == (
        RailErrorKind.REJECTED, 400, "BAD_REQUEST_ERROR", True,
    )  # fmt: skip


def test_over_refund_is_rejected_with_code_description_and_field(client: RazorpayClient, payment):
    payment_id = payment(1000)
    with pytest.raises(RailError) as caught:
        client.create_refund(payment_id, 1001, notes=None, receipt=None, idempotency_key=None)
    error = caught.value
    assert (error.kind, error.http_status, error.code, error.field) == (
        RailErrorKind.REJECTED, 400, "BAD_REQUEST_ERROR", "amount",
    )  # fmt: skip
    assert not error.not_found and error.description


def test_bad_credentials_are_rejected(rail: SandboxProcess):
    with RazorpayClient(rail.url, rail.key_id, "wrong") as client, pytest.raises(RailError) as caught:
        client.fetch_balance()
    assert caught.value.kind is RailErrorKind.REJECTED and caught.value.http_status == 401


@pytest.mark.parametrize("amount", [100.0, True, 0, -1, "100"])
def test_bad_amounts_are_refused_before_anything_is_sent(rail: SandboxProcess, client, payment, amount: object):
    payment_id = payment()
    with pytest.raises(InvalidAmount):
        client.create_refund(payment_id, amount, notes=None, receipt=None, idempotency_key=None)  # type: ignore[arg-type]
    assert [e for e in rail.entities("refund") if e["payment_id"] == payment_id] == []


@pytest.mark.parametrize("bad_id", ["../balance", "pay_X?count=1", "", "p" * 65])
def test_ids_that_would_change_the_url_are_refused(client: RazorpayClient, bad_id: str):
    with pytest.raises(InvalidInput):
        client.fetch_payment(bad_id)


def test_list_count_above_100_is_refused_locally(client: RazorpayClient):
    with pytest.raises(InvalidInput):
        client.list_refunds_for_payment("pay_DEMO0001", count=101)


def test_from_settings_names_the_missing_variable(monkeypatch: pytest.MonkeyPatch, rail: SandboxProcess):
    for name in ("INTERLOCK_RAIL_URL", "INTERLOCK_RAIL_KEY_ID", "INTERLOCK_RAIL_KEY_SECRET"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as caught:
        RazorpayClient.from_settings(load_settings())
    assert caught.value.variable == "INTERLOCK_RAIL_URL"
    for name, value in rail.rail_env().items():
        monkeypatch.setenv(name, value + ("/v1" if name == "INTERLOCK_RAIL_URL" else ""))
    with RazorpayClient.from_settings(load_settings()) as client:
        assert client.fetch_payment("pay_DEMO0001").id == "pay_DEMO0001"  # a trailing /v1 is tolerated


def test_from_settings_names_a_malformed_rail_url(monkeypatch: pytest.MonkeyPatch, rail: SandboxProcess):
    for name, value in rail.rail_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("INTERLOCK_RAIL_URL", "api.razorpay.com")  # no scheme
    with pytest.raises(ConfigError) as caught:
        RazorpayClient.from_settings(load_settings())
    assert caught.value.variable == "INTERLOCK_RAIL_URL" and "http(s)://host" in str(caught.value)
