"""RazorpayX payouts on the sandbox (SPEC §18, sandbox/payouts.py): the mandatory X-Payout-Idempotency key, the
business account's balance (debited the amount plus fees, tax included), low balance refused or queued, cancel,
fetch and list, payees, and — with --lifecycle-ms — processed, reversed and failed with the money given back,
queued payouts started by a top-up oldest first, and the signed payout.* webhooks. Real sandbox processes; an old
journal (written by the sandbox before payouts, tests/sandbox/data) still opens and keeps what it held."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.journal import JOURNAL_FILENAME, Journal
from sandbox.testing import SandboxProcess, start_sandbox, wait_for

ACCOUNT = "7878780080316316"
FEES, TAX = 590, 90  # every payout: a ₹5 fee and its 18% GST (`fees` includes the tax)
KEY_HEADER = "X-Payout-Idempotency"
LIFECYCLE_MS = 300
SECRET = "whsec_sandbox_payouts_test_01"
OLD_JOURNAL = Path(__file__).parent / "data" / "journal_before_payouts.sql"
_ids = itertools.count(1)


# -- fixtures and helpers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A sandbox without a lifecycle: a payout stays `processing`, as in RazorpayX test mode."""
    with start_sandbox(tmp_path_factory.mktemp("payouts")) as sandbox:
        yield sandbox


@pytest.fixture
def http(rail: SandboxProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=rail.url, auth=(rail.key_id, rail.key_secret), timeout=30.0) as client:
        yield client
        rail.clear_faults()
        cancel_queued(client)  # a payout left queued would start in a later test's top-up


@pytest.fixture
def fund_account(rail: SandboxProcess) -> Callable[..., str]:
    """Create a fresh fund account (and contact) on *rail*; returns its id."""
    return lambda **spec: new_fund_account(rail, **spec)


def new_fund_account(rail: SandboxProcess, **spec: Any) -> str:
    fund_account_id = f"fa_PT{os.getpid() % 100_000:05d}{next(_ids):07d}"
    return str(rail.add_fund_account(fund_account_id, **spec)["id"])


def new_key() -> str:
    return f"payout-{os.getpid()}-{next(_ids)}"


def body(fund_account_id: str, amount: int = 10_000, **extra: Any) -> dict[str, Any]:
    return {"account_number": ACCOUNT, "fund_account_id": fund_account_id, "amount": amount, "currency": "INR",
            "mode": "IMPS", "purpose": "payout", **extra}  # fmt: skip


def pay(http: httpx.Client, payload: dict[str, Any], key: str | None = None) -> httpx.Response:
    return http.post("/v1/payouts", json=payload, headers={KEY_HEADER: key or new_key()})


def balance(http: httpx.Client) -> int:
    [account] = http.get("/v1/banking_balances").json()["items"]
    return int(account["amount"])


def payouts_of(rail: SandboxProcess, fund_account_id: str) -> list[dict[str, Any]]:
    return [e for e in rail.entities("payout") if e["entity"]["fund_account_id"] == fund_account_id]


def cancel_queued(http: httpx.Client) -> None:
    queued = http.get("/v1/payouts", params={"account_number": ACCOUNT, "status": "queued", "count": 100}).json()
    for payout in queued["items"]:
        http.post(f"/v1/payouts/{payout['id']}/cancel")


def assert_bad_request(response: httpx.Response, description: str | None = None, field: str | None = None) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "BAD_REQUEST_ERROR"
    if description is not None:
        assert error["description"] == description
    if field is not None:
        assert error["field"] == field


def final(http: httpx.Client, payout_id: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    """The payout once its status is one of *statuses* (waits: the machine may be busy)."""
    return dict(wait_for(lambda: (p := http.get(f"/v1/payouts/{payout_id}").json())["status"] in statuses and p,
                         timeout=30))  # fmt: skip


# -- the create call and its idempotency key -----------------------------------------------------------


def test_a_payout_is_answered_processing_with_fees_and_debits_the_amount_and_fees(rail, http, fund_account):
    rail.set_banking_balance(1_000_000)
    payee = fund_account()
    answer = pay(http, body(payee, 25_000, reference_id="ilk_ref_1", narration="Vendor 42", notes={"k": "v"}))
    assert answer.status_code == 200, answer.text
    payout = answer.json()
    assert list(payout) == ["id", "entity", "fund_account_id", "amount", "currency", "notes", "fees", "tax", "status",
                            "utr", "mode", "purpose", "reference_id", "narration", "batch_id", "status_details",
                            "created_at", "fee_type"]  # fmt: skip
    assert payout["id"].startswith("pout_") and len(payout["id"]) == 19
    assert (payout["status"], payout["fees"], payout["tax"], payout["utr"]) == ("processing", FEES, TAX, None)
    assert (payout["reference_id"], payout["narration"], payout["notes"]) == ("ilk_ref_1", "Vendor 42", {"k": "v"})
    assert balance(http) == 1_000_000 - 25_000 - FEES
    # Without a lifecycle it stays processing, as RazorpayX test mode leaves it.
    assert http.get(f"/v1/payouts/{payout['id']}").json()["status"] == "processing"


def test_the_same_key_and_body_replay_the_first_payout_and_debit_once(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key = fund_account(), new_key()
    first = pay(http, body(payee, 1_000), key)
    again = pay(http, body(payee, 1_000), key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(payouts_of(rail, payee)) == 1
    assert balance(http) == 100_000 - 1_000 - FEES


def test_the_same_key_with_another_body_is_refused(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key = fund_account(), new_key()
    assert pay(http, body(payee, 1_000), key).status_code == 200
    refused = pay(http, body(payee, 1_001), key)
    assert_bad_request(refused, "The idempotency key was already used with a different request body", KEY_HEADER)
    assert len(payouts_of(rail, payee)) == 1


def test_a_missing_key_is_refused_with_razorpays_description(rail, http, fund_account):
    payee = fund_account()
    refused = http.post("/v1/payouts", json=body(payee))
    assert_bad_request(refused, "Idempotency key is missing. Include idempotency header and key in the request.",
                       KEY_HEADER)  # fmt: skip
    assert payouts_of(rail, payee) == []


@pytest.mark.parametrize("key", ["abc", "k" * 37, "semi;colon", "dot.ted.key", "ünïcødé"])
def test_a_malformed_key_is_refused(rail, http, fund_account, key: str):
    payee = fund_account()
    # Raw bytes: httpx would refuse to encode some of these header values itself.
    refused = http.post("/v1/payouts", json=body(payee), headers={KEY_HEADER: key.encode()})
    assert_bad_request(refused, field=KEY_HEADER)
    assert payouts_of(rail, payee) == []


@pytest.mark.parametrize("key", ["abcd", "k" * 36, "53cda91c-8f81-4e77-bbb9-7388f4ac6bf4", "with spaces_and-dash"])
def test_keys_of_4_to_36_letters_digits_hyphens_underscores_and_spaces_are_taken(rail, http, fund_account, key):
    rail.set_banking_balance(100_000)
    assert pay(http, body(fund_account(), 100), f"{key[:-4]}{next(_ids) % 10_000:04d}").status_code == 200


def test_a_key_still_in_progress_answers_409_and_the_payout_lands_once(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key = fund_account(), new_key()
    first: dict[str, httpx.Response] = {}
    worker = threading.Thread(target=lambda: first.update(r=pay(http, body(payee, 700), key)))
    try:
        with rail.slow_held():  # the first request is held until the second has been answered
            worker.start()
            wait_for(lambda: key in rail.health()["in_progress"], timeout=60)
            second = pay(http, body(payee, 700), key)
            assert second.status_code == 409
            assert second.json()["error"]["field"] == KEY_HEADER
    finally:
        worker.join(60)
    assert first["r"].status_code == 200
    assert pay(http, body(payee, 700), key).json()["id"] == first["r"].json()["id"]
    assert len(payouts_of(rail, payee)) == 1


def test_an_ambiguous_504_applies_the_payout_and_the_retry_with_its_key_finds_it(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key = fund_account(), new_key()
    rail.set_faults([{"name": "ambiguous_504", "rate": 1.0, "params": {"html": 0}}])
    assert pay(http, body(payee, 2_000), key).status_code == 504
    rail.clear_faults()
    retry = pay(http, body(payee, 2_000), key)
    [journaled] = payouts_of(rail, payee)
    assert retry.status_code == 200 and retry.json()["id"] == journaled["id"]
    assert journaled["fault"] == "ambiguous_504" and journaled["idempotency_key"] == key
    assert balance(http) == 100_000 - 2_000 - FEES


def test_refund_and_payout_keys_are_separate_key_spaces(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payment_id = f"pay_PK{os.getpid()}x{next(_ids)}"
    rail.add_payment(payment_id, 10_000)
    key = f"shared-key-{os.getpid()}-{next(_ids)}"
    refund = http.post(f"/v1/payments/{payment_id}/refund", json={"amount": 100}, headers={"X-Refund-Idempotency": key})
    payout = pay(http, body(fund_account(), 100), key)
    assert refund.status_code == payout.status_code == 200
    scopes = sorted(k["scope"] for k in rail.journal()["idempotency_keys"] if k["key"] == key)
    assert scopes == ["payout", "refund"]


def test_the_journal_records_the_payout_its_request_and_stamp_but_never_the_credentials(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key, sik = fund_account(), new_key(), f"PAYOUTSIK{os.getpid():08d}{next(_ids):015d}"[:32]
    payload = body(payee, 1_500, reference_id="ilk_" + sik, notes={"interlock_sik": sik})
    pay(http, payload, key)
    [entry] = payouts_of(rail, payee)
    assert (entry["kind"], entry["stamp_sik"], entry["idempotency_key"], entry["origin"]) == ("payout", sik, key, "api")
    assert entry["request"]["body"] == payload
    assert entry["request"]["headers"][KEY_HEADER.lower()] == key
    assert "authorization" not in entry["request"]["headers"]
    assert rail.count_stamped(sik) == 1


@pytest.mark.parametrize(("change", "field"), [
    ({"amount": 99}, "amount"), ({"amount": "100"}, "amount"), ({"amount": 100.0}, "amount"),
    ({"currency": "USD"}, "currency"), ({"mode": "CARD"}, "mode"), ({"purpose": ""}, "purpose"),
    ({"narration": "x" * 31}, "narration"), ({"narration": "no-dashes"}, "narration"),
    ({"reference_id": "r" * 41}, "reference_id"), ({"notes": {f"k{i}": "v" for i in range(16)}}, "notes"),
    ({"queue_if_low_balance": "yes"}, "queue_if_low_balance"), ({"fund_account": {}}, "fund_account"),
    ({"account_number": ""}, "account_number"), ({"fund_account_id": None}, "fund_account_id"),
])  # fmt: skip
def test_the_body_is_checked_strictly(rail, http, fund_account, change: dict[str, Any], field: str):
    payee = fund_account()
    payload = {k: v for k, v in {**body(payee), **change}.items() if v is not None}
    assert_bad_request(pay(http, payload), field=field)
    assert payouts_of(rail, payee) == []


def test_another_account_number_is_refused(rail, http, fund_account):
    assert_bad_request(pay(http, body(fund_account(), account_number="2323230032761492")),
                       "The account number is invalid.", "account_number")  # fmt: skip


def test_the_mode_must_suit_the_fund_account(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    bank, vpa = fund_account(), fund_account(account_type="vpa")
    assert_bad_request(pay(http, body(bank, mode="UPI")), field="mode")
    assert_bad_request(pay(http, body(vpa, mode="NEFT")), field="mode")
    assert pay(http, body(vpa, mode="UPI")).json()["status"] == "processing"
    assert pay(http, body(bank, mode="RTGS")).json()["status"] == "processing"


# -- payees ---------------------------------------------------------------------------------------------


def test_an_inactive_fund_account_or_contact_is_refused(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    inactive = fund_account(active=False)
    assert_bad_request(pay(http, body(inactive)), "Payouts cannot be created on an inactive fund account",
                       "fund_account_id")  # fmt: skip
    inactive_contact = fund_account(contact={"name": "Gone Vendor", "active": False})
    assert_bad_request(pay(http, body(inactive_contact)), field="fund_account_id")
    unknown = pay(http, body("fa_DOESNOTEXIST01"))
    assert_bad_request(unknown, "The id provided does not exist")
    assert balance(http) == 100_000


def test_a_fund_account_deactivated_later_refuses_the_next_payout(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee = fund_account()
    assert pay(http, body(payee, 100)).status_code == 200
    rail.add_fund_account(payee, active=False)
    assert_bad_request(pay(http, body(payee, 100)), field="fund_account_id")


def test_a_slow_payout_is_checked_against_the_fund_account_as_it_is_when_applied(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payee, key = fund_account(), new_key()
    answer: dict[str, httpx.Response] = {}
    worker = threading.Thread(target=lambda: answer.update(r=pay(http, body(payee, 700), key)))
    try:
        with rail.slow_held():  # the payout is held until its fund account has been deactivated
            worker.start()
            wait_for(lambda: key in rail.health()["in_progress"], timeout=60)
            rail.add_fund_account(payee, active=False)  # deactivated while the payout is still being processed
    finally:
        worker.join(60)
    assert_bad_request(answer["r"], "Payouts cannot be created on an inactive fund account", "fund_account_id")
    assert payouts_of(rail, payee) == [] and balance(http) == 100_000


def test_fund_accounts_and_contacts_are_served_in_razorpays_shape(rail, http, fund_account):
    bank = fund_account(bank_account={"name": "Asha Rao", "ifsc": "ICIC0000104", "account_number": "1121431121541"},
                        contact={"name": "Asha Rao", "email": "asha@example.com", "type": "employee",
                                 "reference_id": "emp-7", "notes": {"team": "ops"}})  # fmt: skip
    account = http.get(f"/v1/fund_accounts/{bank}").json()
    assert account["entity"] == "fund_account" and account["account_type"] == "bank_account"
    assert account["bank_account"] == {"ifsc": "ICIC0000104", "bank_name": "ICICI Bank", "name": "Asha Rao",
                                       "notes": [], "account_number": "1121431121541"}  # fmt: skip
    assert (account["active"], account["batch_id"]) == (True, None) and "vpa" not in account
    contact = http.get(f"/v1/contacts/{account['contact_id']}").json()
    assert account["contact_id"].startswith("cont_") and len(account["contact_id"]) == 19
    assert {k: contact[k] for k in ("entity", "name", "email", "type", "reference_id", "notes", "active")} == {
        "entity": "contact", "name": "Asha Rao", "email": "asha@example.com", "type": "employee",
        "reference_id": "emp-7", "notes": {"team": "ops"}, "active": True,
    }  # fmt: skip
    vpa = http.get(f"/v1/fund_accounts/{fund_account(account_type='vpa', vpa={'address': 'asha.rao@okicici'})}").json()
    assert vpa["vpa"] == {"username": "asha.rao", "handle": "okicici", "address": "asha.rao@okicici"}
    assert_bad_request(http.get("/v1/fund_accounts/fa_DOESNOTEXIST01"), "The id provided does not exist")
    assert_bad_request(http.get("/v1/contacts/cont_DOESNOTEXIST01"), "The id provided does not exist")


@pytest.mark.parametrize("spec", [
    {"id": "fa_short"}, {"account_type": "card"}, {"account_type": "vpa", "bank_account": {}},
    {"contact_id": "cont_DOESNOTEXIST01"}, {"bank_account": {"ifsc": "not-an-ifsc"}}, {"active": "yes"},
    {"contact": {"type": "friend"}}, {"vpa": {"address": "no-handle"}, "account_type": "vpa"},
])  # fmt: skip
def test_a_malformed_fund_account_is_refused_by_the_control_surface(http, spec: dict[str, Any]):
    assert_bad_request(http.post("/__sandbox/fund_accounts", json=spec))


# -- the balance: refused, queued, cancelled -------------------------------------------------------------


def test_the_banking_balance_is_razorpayx_shaped_and_apart_from_the_gateway_balance(rail, http):
    rail.set_balance(777_000)
    rail.set_banking_balance(123_456)
    listed = http.get("/v1/banking_balances").json()
    assert listed["entity"] == "collection" and listed["count"] == 1
    [account] = listed["items"]
    assert {k: account[k] for k in ("entity", "currency", "account_number", "account_type", "amount",
                                    "available_amount")} == {
        "entity": "banking_balance", "currency": "INR", "account_number": ACCOUNT, "account_type": "razorpayx_lite",
        "amount": 123_456, "available_amount": 123_456,
    }  # fmt: skip
    assert isinstance(account["refreshed_at"], int)
    assert http.get("/v1/balance").json()["balance"] == 777_000
    assert http.get("/v1/banking_balances", params={"account_type": "current_account"}).json()["count"] == 0
    assert_bad_request(http.get("/v1/banking_balances", params={"account_type": "savings"}), field="account_type")


def test_over_the_balance_without_queueing_is_refused_and_moves_nothing(rail, http, fund_account):
    rail.set_banking_balance(10_000 + FEES - 1)  # one paisa short of amount + fees
    payee, key = fund_account(), new_key()
    refused = pay(http, body(payee, 10_000), key)
    assert_bad_request(refused, "Your account does not have enough balance to carry out the payout operation.")
    assert payouts_of(rail, payee) == [] and balance(http) == 10_000 + FEES - 1
    rail.set_banking_balance(10_000 + FEES)  # the refused request left its key free: the retry goes through
    assert pay(http, body(payee, 10_000), key).json()["status"] == "processing"
    assert balance(http) == 0


def test_over_the_balance_with_queueing_waits_queued_and_debits_nothing(rail, http, fund_account):
    rail.set_banking_balance(5_000)
    payee = fund_account()
    queued = pay(http, body(payee, 10_000, queue_if_low_balance=True)).json()
    assert (queued["status"], queued["fees"], queued["tax"]) == ("queued", 0, 0)
    assert queued["status_details"]["reason"] == "low_balance"
    assert balance(http) == 5_000


def test_only_a_queued_payout_can_be_cancelled(rail, http, fund_account):
    rail.set_banking_balance(0)
    payee = fund_account()
    queued = pay(http, body(payee, 10_000, queue_if_low_balance=True)).json()
    cancelled = http.post(f"/v1/payouts/{queued['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert http.get(f"/v1/payouts/{queued['id']}").json()["status"] == "cancelled"
    assert_bad_request(http.post(f"/v1/payouts/{queued['id']}/cancel"))
    rail.set_banking_balance(100_000)  # a cancelled payout never starts
    assert http.get(f"/v1/payouts/{queued['id']}").json()["status"] == "cancelled"
    processing = pay(http, body(payee, 1_000)).json()
    assert_bad_request(http.post(f"/v1/payouts/{processing['id']}/cancel"),
                       "Only queued payouts can be cancelled; this payout is processing.")  # fmt: skip
    assert_bad_request(http.post("/v1/payouts/pout_DOESNOTEXIST1/cancel"), "The id provided does not exist")
    assert balance(http) == 100_000 - 1_000 - FEES


def test_a_top_up_starts_queued_payouts_oldest_first_letting_one_that_does_not_fit_wait(rail, http, fund_account):
    rail.set_banking_balance(0)
    payee = fund_account()
    older, large, younger = (pay(http, body(payee, amount, queue_if_low_balance=True)).json()["id"]
                             for amount in (5_000, 50_000, 5_000))  # fmt: skip
    rail.set_banking_balance(5_000 + FEES)  # room for one small payout: the older one goes
    status = {p: http.get(f"/v1/payouts/{p}").json()["status"] for p in (older, large, younger)}
    assert status == {older: "processing", large: "queued", younger: "queued"}
    assert balance(http) == 0
    rail.set_banking_balance(5_000 + FEES + 100)  # the large one still does not fit; the younger one does
    status = {p: http.get(f"/v1/payouts/{p}").json()["status"] for p in (older, large, younger)}
    assert status == {older: "processing", large: "queued", younger: "processing"}
    assert http.get(f"/v1/payouts/{younger}").json()["fees"] == FEES
    assert balance(http) == 100


# -- fetch and list -----------------------------------------------------------------------------------------


def test_payouts_are_fetched_and_listed_newest_first_with_filters_and_paging(rail, http, fund_account):
    rail.set_banking_balance(1_000_000)
    payee, other = fund_account(), fund_account()
    made = [pay(http, body(payee, 100 + i, reference_id=f"ref-{i}")).json()["id"] for i in range(4)]
    pay(http, body(other, 100))
    fetched = http.get(f"/v1/payouts/{made[1]}").json()
    assert (fetched["id"], fetched["amount"], fetched["reference_id"]) == (made[1], 101, "ref-1")
    params = {"account_number": ACCOUNT, "fund_account_id": payee}
    listed = http.get("/v1/payouts", params=params).json()
    assert listed["entity"] == "collection" and [p["id"] for p in listed["items"]] == made[::-1]
    pages = [http.get("/v1/payouts", params={**params, "count": 3, "skip": s}).json()["items"] for s in (0, 3)]
    assert [p["id"] for page in pages for p in page] == made[::-1]
    by_reference = http.get("/v1/payouts", params={**params, "reference_id": "ref-2"}).json()["items"]
    assert [p["id"] for p in by_reference] == [made[2]]
    contact_id = http.get(f"/v1/fund_accounts/{payee}").json()["contact_id"]
    by_contact = http.get("/v1/payouts", params={"account_number": ACCOUNT, "contact_id": contact_id}).json()
    assert [p["id"] for p in by_contact["items"]] == made[::-1]
    created = fetched["created_at"]
    window = http.get("/v1/payouts", params={**params, "from": created, "to": created, "count": 100}).json()
    assert made[1] in [p["id"] for p in window["items"]]
    assert http.get("/v1/payouts", params={**params, "from": created + 100_000}).json()["count"] == 0


def test_the_list_needs_our_account_number_and_known_parameters(http):
    assert_bad_request(http.get("/v1/payouts"), "The account number field is required.", "account_number")
    assert_bad_request(http.get("/v1/payouts", params={"account_number": "1234567890"}), field="account_number")
    for params in ({"count": 101}, {"mode": "CARD"}, {"status": "done"}, {"purpose": "refund"}):
        assert_bad_request(http.get("/v1/payouts", params={"account_number": ACCOUNT, **params}))
    assert_bad_request(http.get("/v1/payouts/pout_DOESNOTEXIST1"), "The id provided does not exist")


def test_replica_lag_hides_a_young_payout_from_fetch_and_list(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payout_id = pay(http, body(fund_account(), 100)).json()["id"]
    rail.set_faults([{"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 600_000}}])
    assert_bad_request(http.get(f"/v1/payouts/{payout_id}"), "The id provided does not exist")
    listed = http.get("/v1/payouts", params={"account_number": ACCOUNT, "count": 100}).json()["items"]
    assert payout_id not in [p["id"] for p in listed]


# -- moving a payout by hand (RazorpayX test mode's dashboard) -------------------------------------------


def test_a_payout_moved_by_hand_is_processed_then_reversed_and_the_money_comes_back(rail, http, fund_account):
    rail.set_banking_balance(100_000)
    payout_id = pay(http, body(fund_account(), 10_000)).json()["id"]
    processed = rail.move_payout(payout_id, "processed")
    assert processed["status"] == "processed" and len(processed["utr"]) == 12
    assert balance(http) == 100_000 - 10_000 - FEES
    reversed_ = rail.move_payout(payout_id, "reversed")
    assert (reversed_["status"], reversed_["utr"]) == ("reversed", processed["utr"])
    assert balance(http) == 100_000
    with pytest.raises(httpx.HTTPStatusError) as refused:
        rail.move_payout(payout_id, "processed")
    assert refused.value.response.status_code == 409


# -- the lifecycle: processed, reversed, failed; webhooks ------------------------------------------------


@pytest.fixture(scope="module")
def inbox() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook receiver on loopback: it keeps every event whose signature is right and answers 401 otherwise."""
    events: list[dict[str, Any]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            expected = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
            signed = hmac.compare_digest(self.headers.get("X-Razorpay-Signature", ""), expected)
            if signed:
                events.append(json.loads(raw))
            self.send_response(200 if signed else 401)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/webhooks/razorpay", events
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def living(tmp_path_factory: pytest.TempPathFactory, inbox) -> Iterator[SandboxProcess]:
    env = {"INTERLOCK_SANDBOX_LIFECYCLE_MS": str(LIFECYCLE_MS), "INTERLOCK_SANDBOX_WEBHOOK_URL": inbox[0],
           "INTERLOCK_WEBHOOK_SECRETS": SECRET}  # fmt: skip
    with start_sandbox(tmp_path_factory.mktemp("living-payouts"), env=env) as sandbox:
        yield sandbox


@pytest.fixture
def live(living: SandboxProcess) -> Iterator[httpx.Client]:
    living.clear_faults()
    with httpx.Client(base_url=living.url, auth=(living.key_id, living.key_secret), timeout=30.0) as client:
        yield client
        living.clear_faults()
        cancel_queued(client)


def events_for(inbox: tuple[str, list[dict[str, Any]]], payout_id: str) -> list[tuple[str, str]]:
    """(event, the payout's status in it) of every payout event received for *payout_id*, sorted: deliveries
    run concurrently and Razorpay promises no order."""
    return sorted((e["event"], e["payload"]["payout"]["entity"]["status"]) for e in list(inbox[1])
                  if e["contains"] == ["payout"] and e["payload"]["payout"]["entity"]["id"] == payout_id)  # fmt: skip


def test_a_payout_goes_processing_then_processed_and_says_so_by_webhook(living, live, inbox):
    living.set_banking_balance(100_000)
    payout = pay(live, body(new_fund_account(living), 10_000)).json()
    assert payout["status"] == "processing"
    done = final(live, payout["id"], ("processed", "failed", "reversed"))
    assert (done["status"], done["fees"], done["tax"]) == ("processed", FEES, TAX) and len(done["utr"]) == 12
    assert balance(live) == 100_000 - 10_000 - FEES
    expected = [("payout.initiated", "processing"), ("payout.processed", "processed")]
    assert wait_for(lambda: events_for(inbox, payout["id"]) == expected, timeout=30)
    changes = [(e["detail"]["was"], e["detail"]["now"]) for e in living.journal()["events"]
               if e["kind"] == "entity_status_changed" and e["detail"]["id"] == payout["id"]]  # fmt: skip
    assert changes == [("processing", "processed")]


def test_a_reversed_payout_is_processed_then_reversed_and_credits_back_amount_and_fees(living, live, inbox):
    living.set_banking_balance(100_000)
    living.set_faults([{"name": "payout_reversed", "rate": 1.0}])
    payout = pay(live, body(new_fund_account(living), 10_000)).json()
    living.clear_faults()
    done = final(live, payout["id"], ("reversed", "failed"))
    assert done["status"] == "reversed" and done["status_details"]["reason"] == "beneficiary_bank_reversal"
    assert done["utr"] is not None  # it had been processed: the bank's reference stays
    assert balance(live) == 100_000
    changes = [(e["detail"]["was"], e["detail"]["now"]) for e in living.journal()["events"]
               if e["kind"] == "entity_status_changed" and e["detail"]["id"] == payout["id"]]  # fmt: skip
    assert changes == [("processing", "processed"), ("processed", "reversed")]
    expected = [("payout.initiated", "processing"), ("payout.processed", "processed"), ("payout.reversed", "reversed")]
    assert wait_for(lambda: events_for(inbox, payout["id"]) == sorted(expected), timeout=30)


def test_a_failed_payout_credits_back_amount_and_fees(living, live, inbox):
    living.set_banking_balance(100_000)
    living.set_faults([{"name": "payout_failed", "rate": 1.0}])
    payout = pay(live, body(new_fund_account(living), 10_000)).json()
    living.clear_faults()
    done = final(live, payout["id"], ("failed", "processed", "reversed"))
    assert (done["status"], done["utr"]) == ("failed", None)
    assert balance(live) == 100_000
    expected = [("payout.failed", "failed"), ("payout.initiated", "processing")]
    assert wait_for(lambda: events_for(inbox, payout["id"]) == expected, timeout=30)


def test_a_queued_payout_starts_on_a_top_up_and_is_processed(living, live, inbox):
    living.set_banking_balance(0)
    payee = new_fund_account(living)
    queued = pay(live, body(payee, 10_000, queue_if_low_balance=True)).json()
    assert queued["status"] == "queued"
    assert wait_for(lambda: events_for(inbox, queued["id"]) == [("payout.queued", "queued")], timeout=30)
    assert live.get(f"/v1/payouts/{queued['id']}").json()["status"] == "queued"  # nothing moves it but money
    released = living.set_banking_balance(10_000 + FEES + 1)
    assert released["amount"] == 1
    done = final(live, queued["id"], ("processed", "failed", "reversed"))
    assert (done["status"], done["fees"]) == ("processed", FEES)
    assert balance(live) == 1
    expected = [("payout.initiated", "processing"), ("payout.processed", "processed"), ("payout.queued", "queued")]
    assert wait_for(lambda: events_for(inbox, queued["id"]) == expected, timeout=30)


def test_a_reversal_makes_room_that_starts_a_queued_payout(living, live):
    living.set_banking_balance(10_000 + FEES)
    payee = new_fund_account(living)
    # Held, the failure waits for the second payout however slow the machine is: it finds no room, and is queued.
    with living.lifecycle_held():
        living.set_faults([{"name": "payout_failed", "rate": 1.0}])
        failing = pay(live, body(payee, 10_000)).json()
        living.clear_faults()
        waiting = pay(live, body(payee, 10_000, queue_if_low_balance=True)).json()
        assert (failing["status"], waiting["status"]) == ("processing", "queued")
        assert live.get(f"/v1/payouts/{failing['id']}").json()["status"] == "processing"
    assert final(live, failing["id"], ("failed",))["status"] == "failed"
    assert final(live, waiting["id"], ("processed",))["fees"] == FEES
    assert balance(live) == 0


def test_a_cancelled_payout_sends_payout_updated(living, live, inbox):
    living.set_banking_balance(0)
    queued = pay(live, body(new_fund_account(living), 10_000, queue_if_low_balance=True)).json()
    assert live.post(f"/v1/payouts/{queued['id']}/cancel").json()["status"] == "cancelled"
    expected = [("payout.queued", "queued"), ("payout.updated", "cancelled")]
    assert wait_for(lambda: events_for(inbox, queued["id"]) == expected, timeout=30)


# -- old journals ---------------------------------------------------------------------------------------------


def test_a_journal_written_before_payouts_opens_and_keeps_what_it_held(tmp_path: Path):
    conn = sqlite3.connect(tmp_path / JOURNAL_FILENAME)
    conn.executescript(OLD_JOURNAL.read_text())
    conn.close()
    with start_sandbox(tmp_path) as sandbox:
        with httpx.Client(base_url=sandbox.url, auth=(sandbox.key_id, sandbox.key_secret), timeout=30.0) as http:
            journal = sandbox.journal()
            [refund] = [e for e in journal["entities"] if e["kind"] == "refund"]
            assert http.get(f"/v1/refunds/{refund['id']}").json()["amount"] == 10_000
            assert sandbox.count_stamped("OLDSIK" + "A" * 26) == 1
            assert [(k["key"], k["scope"]) for k in journal["idempotency_keys"]] == [("old-key-0000000001", "refund")]
            # The old key still holds its refund (the body differs, so it is refused, not applied twice) ...
            again = http.post("/v1/payments/pay_DEMO0002/refund", json={"amount": 100},
                              headers={"X-Refund-Idempotency": "old-key-0000000001"})  # fmt: skip
            assert_bad_request(again, field="X-Refund-Idempotency")
            # ... and the journal now takes payouts, even with the same key in the payout key space.
            sandbox.set_banking_balance(100_000)
            payee = new_fund_account(sandbox)
            assert pay(http, body(payee, 1_000), "old-key-0000000001").json()["status"] == "processing"
            assert [e["kind"] for e in sandbox.journal()["entities"]] == ["refund", "settlement", "payout"]


def test_an_old_journal_is_rebuilt_once_and_a_journal_without_payment_details_gets_them(tmp_path: Path, caplog):
    path = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_JOURNAL.read_text())
    conn.execute("ALTER TABLE payments DROP COLUMN details_json")  # as journals were before payment details
    conn.close()
    with caplog.at_level("WARNING", logger="sandbox.schema"):
        Journal(path).close()
    assert {r.getMessage().split()[2] for r in caplog.records} == {"payments", "entities", "idempotency_keys"}
    caplog.clear()
    with caplog.at_level("WARNING", logger="sandbox.schema"):
        journal = Journal(path)
    assert caplog.records == []  # once rebuilt, the tables are the current ones
    payment = journal.payment("pay_DEMO0001")
    assert payment is not None and payment["details"] == {} and payment["amount_refunded"] == 10_000
    journal.close()
