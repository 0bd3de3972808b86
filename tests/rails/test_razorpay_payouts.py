"""The RazorpayX payout calls of the REST client, against a real sandbox process (SPEC §18).

What the rail worker will rely on: the client sends exactly the stamps and key it is given and never one of its
own; the same key and body replay the first payout; a refusal is REJECTED only when the rail really refused, and a
4xx about the key (used before with another body) is AMBIGUOUS because a payout exists under it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from interlock.errors import InvalidInput
from rails.razorpay import RailError, RailErrorKind, RazorpayClient
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
from sandbox.testing import SandboxProcess
from tests.procs import wait_until

_ids = itertools.count(1)
ACCOUNT = DEFAULT_ACCOUNT_NUMBER


@pytest.fixture
def fund_account(rail: SandboxProcess) -> Callable[..., str]:
    def make(**extra: Any) -> str:
        fund_account_id = f"fa_{os.getpid() % 10**6:06d}P{next(_ids):07d}"  # Razorpay's 14 characters
        rail.add_fund_account(fund_account_id, **extra)
        return fund_account_id

    return make


def payout_args(fund_account_id: str, sik: str, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "account_number": ACCOUNT, "fund_account_id": fund_account_id, "amount": 48_000, "currency": "INR",
        "mode": "IMPS", "purpose": "vendor bill", "queue_if_low_balance": False, "reference_id": "ilk_" + sik,
        "narration": "Interlock payout", "notes": {"interlock_sik": sik}, "idempotency_key": sik,
    }  # fmt: skip
    return {**args, **overrides}


def test_create_payout_sends_the_callers_stamps_and_key(rail: SandboxProcess, client: RazorpayClient, fund_account,
                                                        sik: str):  # fmt: skip
    rail.set_banking_balance(10_000_000)
    payout = client.create_payout(**payout_args(fund_account(), sik))
    assert payout.status == "processing"
    assert payout.reference_id == "ilk_" + sik and payout.stamp_sik == sik and payout.carries_stamp(sik)
    assert payout.fees == 590 and payout.tax == 90  # ₹5 + 18% GST, shown once processing
    sent = next(e for e in rail.entities() if e["entity"]["id"] == payout.id)
    assert sent["idempotency_key"] == sik
    body = sent["request"]["body"]
    assert body["reference_id"] == "ilk_" + sik and body["notes"] == {"interlock_sik": sik}
    assert sent["request"]["headers"]["x-payout-idempotency"] == sik


def test_the_same_key_and_body_replay_the_first_payout(rail: SandboxProcess, client: RazorpayClient, fund_account,
                                                       sik: str):  # fmt: skip
    rail.set_banking_balance(10_000_000)
    args = payout_args(fund_account(), sik)
    first = client.create_payout(**args)
    again = client.create_payout(**args)
    assert again.id == first.id
    assert [e["entity"]["id"] for e in rail.entities()].count(first.id) == 1
    found = client.list_payouts(ACCOUNT, reference_id="ilk_" + sik)
    assert [p.id for p in found.items] == [first.id] and found.exhausted
    assert client.fetch_payout(first.id).amount == 48_000


def test_the_key_used_before_with_another_body_is_ambiguous_not_refused(
    rail: SandboxProcess, client: RazorpayClient, fund_account, sik: str
):
    """The rail's 400 names the key: a payout exists under it, so nothing here may read it as "nothing moved"."""
    rail.set_banking_balance(10_000_000)
    payee = fund_account()
    client.create_payout(**payout_args(payee, sik))
    with pytest.raises(RailError) as caught:
        client.create_payout(**payout_args(payee, sik, amount=48_001))
    assert caught.value.kind is RailErrorKind.AMBIGUOUS
    assert caught.value.http_status == 400 and caught.value.field == "X-Payout-Idempotency"


def test_low_balance_is_refused_unless_queued_and_a_queued_payout_cancels(
    rail: SandboxProcess, client: RazorpayClient, fund_account, sik: str
):
    rail.set_banking_balance(1_000)
    payee = fund_account()
    with pytest.raises(RailError) as caught:
        client.create_payout(**payout_args(payee, sik))
    assert caught.value.kind is RailErrorKind.REJECTED and "balance" in str(caught.value)
    queued = client.create_payout(**payout_args(payee, sik[:-1] + "Q", queue_if_low_balance=True))
    assert queued.status == "queued" and queued.fees == 0
    assert client.fetch_banking_balance(ACCOUNT).amount == 1_000  # nothing debited for a queued payout
    cancelled = client.cancel_payout(queued.id)
    assert cancelled.status == "cancelled"
    with pytest.raises(RailError) as again:
        client.cancel_payout(queued.id)
    assert again.value.kind is RailErrorKind.REJECTED


def test_fund_account_and_banking_balance_are_typed(rail: SandboxProcess, client: RazorpayClient, fund_account):
    rail.set_banking_balance(123_456)
    active = client.fetch_fund_account(fund_account())
    assert active.active and active.account_type == "bank_account" and active.contact_id.startswith("cont_")
    upi = client.fetch_fund_account(fund_account(account_type="vpa", active=False))
    assert not upi.active and upi.vpa is not None and "@" in upi.vpa["address"]
    balance = client.fetch_banking_balance(ACCOUNT)
    assert (balance.account_number, balance.amount, balance.currency) == (ACCOUNT, 123_456, "INR")
    with pytest.raises(RailError) as caught:
        client.fetch_banking_balance("0000000000")
    assert caught.value.kind is RailErrorKind.REJECTED and "0000000000" in str(caught.value)


def test_an_inactive_payee_is_refused(client: RazorpayClient, fund_account, sik: str):
    with pytest.raises(RailError) as caught:
        client.create_payout(**payout_args(fund_account(active=False), sik))
    assert caught.value.kind is RailErrorKind.REJECTED and caught.value.field == "fund_account_id"


@pytest.mark.parametrize("key", ["", "abc", "x" * 37, "ilk/../"])
def test_a_bad_key_is_refused_before_anything_is_sent(rail: SandboxProcess, client: RazorpayClient, fund_account,
                                                      sik: str, key: str):  # fmt: skip
    before = len(rail.entities())
    with pytest.raises(InvalidInput):
        client.create_payout(**payout_args(fund_account(), sik, idempotency_key=key))
    assert len(rail.entities()) == before


def test_a_504_after_the_apply_is_ambiguous_and_the_retry_replays(
    rail: SandboxProcess, client: RazorpayClient, fund_account, sik: str
):
    rail.set_banking_balance(10_000_000)
    args = payout_args(fund_account(), sik)
    rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
    with pytest.raises(RailError) as caught:
        client.create_payout(**args)
    assert caught.value.kind is RailErrorKind.AMBIGUOUS
    rail.clear_faults()
    applied = [e["entity"]["id"] for e in rail.entities() if e["entity"].get("reference_id") == "ilk_" + sik]
    assert len(applied) == 1
    assert client.create_payout(**args).id == applied[0]


def test_a_payout_stamped_only_by_its_reference_counts_as_stamped(rail: SandboxProcess, client: RazorpayClient,
                                                                  fund_account, sik: str):  # fmt: skip
    """What the chaos checks count: a payout whose notes lost the stamp still carries it in reference_id."""
    rail.set_banking_balance(10_000_000)
    client.create_payout(**payout_args(fund_account(), sik, notes=None))
    assert rail.count_stamped(sik) == 1


def test_a_second_request_while_the_first_with_its_key_is_processing_is_ambiguous(
    rail: SandboxProcess, client: RazorpayClient, fund_account, sik: str
):
    """SPEC §18: 409 means the first request with this key is still running — it may yet apply. Never a refusal,
    and never a reason to switch keys: the same key later replays what the first one made."""
    rail.set_banking_balance(10_000_000)
    args = payout_args(fund_account(), sik)
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=60_000) as first_client:
        first: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: first.update(payout=first_client.create_payout(**args)))
        try:
            with rail.slow_held():  # the first request is held until the second has been answered
                thread.start()
                wait_until(lambda: sik in rail.health()["in_progress"], timeout=60,
                           what="the first request to be in progress")  # fmt: skip
                with pytest.raises(RailError) as caught:
                    client.create_payout(**args)
        finally:
            thread.join(timeout=60)
    assert caught.value.kind is RailErrorKind.AMBIGUOUS and caught.value.http_status == 409
    assert client.create_payout(**args).id == first["payout"].id
    assert rail.count_stamped(sik) == 1

