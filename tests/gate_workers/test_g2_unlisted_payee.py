"""G2 and a payee on no list of the mandate (ADR 0034): refused by default (`unlisted: block`), held for a person
with `unlisted: hold` — showing the fund account as the rail reports it — while an inactive payee and every value
rule still refuse; a payee an approver added is allowed under that mandate version only."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

from gate_workers.context import ResolvedAction
from gate_workers.gates import g2_value
from interlock.mandate import Mandate
from interlock.messages import Verdict
from interlock.sik import compute_sik
from ledger.db import transaction
from ledger.payee_amendments import MandateVersion, allow_payee
from rails.models import BankingBalance, FundAccount
from tests.gate_workers.factories import context
from tests.mandates import AGENT, MERCHANT, make_mandate

LISTED, STRANGER = "fa_LISTEDPAYEE001", "fa_STRANGERPAYEE1"
ACCOUNT = "7878780080316316"


def mandate(unlisted: str | None = None, **changes: Any) -> Mandate:
    payees: dict[str, Any] = {"fund_account_ids": [LISTED]}
    if unlisted is not None:
        payees["unlisted"] = unlisted
    return make_mandate({"scope.grants.create_payout.payees": payees, **changes})


def fund_account(fid: str = STRANGER, *, active: bool = True, vpa: bool = False) -> FundAccount:
    details = ({"vpa": {"username": "stranger", "handle": "okhdfcbank", "address": "stranger@okhdfcbank"}} if vpa else
               {"bank_account": {"ifsc": "HDFC0000053", "bank_name": "HDFC Bank", "name": "Gabbar Traders",
                                 "notes": [], "account_number": "50100012345678"}})  # fmt: skip
    raw = {"id": fid, "entity": "fund_account", "contact_id": "cont_STRANGER0000001",
           "account_type": "vpa" if vpa else "bank_account", "active": active, **details}
    found: FundAccount = FundAccount.from_raw(raw)
    return found


def payout(amount: int = 48_000, payee: FundAccount | None = None, balance: int = 5_000_000) -> ResolvedAction:
    payee = payee or fund_account()
    sik = compute_sik(merchant_id=MERCHANT, tool="create_payout", subject=payee.contact_id, amount_minor=amount,
                      currency="INR", window=1)  # fmt: skip
    banking: BankingBalance = BankingBalance.from_raw({"account_number": ACCOUNT, "currency": "INR",
                                                       "amount": balance})  # fmt: skip
    return ResolvedAction(
        request_id="req_p", agent_id=AGENT, merchant_id=MERCHANT, tool="create_payout",
        arguments={"fund_account_id": payee.id, "amount": amount}, subject=payee.id, amount_minor=amount,
        currency="INR", requested_amount=amount, fund_account=payee, banking_balance=banking, sik=sik, window=1,
        params={"amount": amount, "account_number": ACCOUNT, "contact_id": payee.contact_id},
    )  # fmt: skip


def test_an_unlisted_payee_is_refused_by_default_as_before(ledger: sqlite3.Connection) -> None:
    for given in (None, "block"):
        result = g2_value.check(payout(), context(ledger, mandate(given)))
        assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G2_PAYEE_NOT_ALLOWED")
        assert result.detail == {"fund_account_id": STRANGER, "contact_id": "cont_STRANGER0000001"}


def test_with_unlisted_hold_the_call_waits_for_a_person_who_sees_the_payee_as_the_rail_reports_it(
    ledger: sqlite3.Connection,
) -> None:
    result = g2_value.check(payout(), context(ledger, mandate("hold")))
    assert (result.verdict, result.reason_code) == (Verdict.HOLD, "G2_PAYEE_UNLISTED_HELD")
    assert result.detail["payee"] == {
        "fund_account_id": STRANGER, "contact_id": "cont_STRANGER0000001", "account_type": "bank_account",
        "active": True, "name": "Gabbar Traders", "account_number": "xxxxxxxxxx5678", "ifsc": "HDFC0000053",
        "bank_name": "HDFC Bank",
    }  # fmt: skip
    assert result.detail["payee_digest"] == fund_account().digest
    assert result.detail["approvers"] == ["ops_lead@example.com"] and result.detail["value"] == "G2_WITHIN_VALUE"
    upi = g2_value.check(payout(payee=fund_account(vpa=True)), context(ledger, mandate("hold")))
    assert upi.verdict is Verdict.HOLD and upi.detail["payee"]["vpa"] == "stranger@okhdfcbank"
    # A listed payee is not held for being listed.
    listed = g2_value.check(payout(payee=fund_account(LISTED)), context(ledger, mandate("hold")))
    assert (listed.verdict, listed.reason_code) == (Verdict.ALLOW, "G2_WITHIN_VALUE")


def test_an_inactive_unlisted_payee_and_every_value_rule_still_refuse(ledger: sqlite3.Connection) -> None:
    ctx = context(ledger, mandate("hold"))
    inactive = g2_value.check(payout(payee=fund_account(active=False)), ctx)
    assert (inactive.verdict, inactive.reason_code) == (Verdict.BLOCK, "G2_PAYEE_INACTIVE")
    above = g2_value.check(payout(500_001), ctx)
    assert (above.verdict, above.reason_code) == (Verdict.BLOCK, "G2_ABOVE_MAX")
    broke = g2_value.check(payout(48_000, balance=40_000), ctx)
    assert (broke.verdict, broke.reason_code) == (Verdict.BLOCK, "G2_EXCEEDS_PAYOUT_BALANCE")
    # Above the hold threshold too: held, for the payee first — one person decides both.
    both = g2_value.check(payout(350_000), ctx)
    assert (both.verdict, both.reason_code, both.detail["value"]) == (
        Verdict.HOLD, "G2_PAYEE_UNLISTED_HELD", "G2_ABOVE_HOLD_THRESHOLD")  # fmt: skip


def test_a_listed_payout_held_for_its_amount_shows_the_approver_whom_it_pays(ledger: sqlite3.Connection) -> None:
    result = g2_value.check(payout(350_000, payee=fund_account(LISTED)), context(ledger, mandate()))
    assert (result.verdict, result.reason_code) == (Verdict.HOLD, "G2_ABOVE_HOLD_THRESHOLD")
    assert result.detail["payee"]["name"] == "Gabbar Traders" and result.detail["payee_digest"]


def test_unlisted_hold_without_approvers_is_refused_at_the_gate_too(ledger: sqlite3.Connection) -> None:
    # The loader refuses such a mandate; a model built around it must not hold for nobody.
    held = mandate("hold")
    nobody = held.model_copy(update={"approval": held.approval.model_copy(update={"approvers": [],
                                                                                   "hold_above_minor": None})})
    result = g2_value.check(payout(), context(ledger, nobody))
    assert (result.verdict, result.reason_code) == (Verdict.BLOCK, "G2_PAYEE_NOT_ALLOWED")


def test_a_payee_an_approver_added_is_allowed_under_that_mandate_version_only(ledger: sqlite3.Connection) -> None:
    held = mandate("hold")
    with transaction(ledger):
        seq = allow_payee(ledger, MandateVersion(MERCHANT, AGENT, held.mandate_hash), fund_account_id=STRANGER,
                          contact_id="cont_STRANGER0000001", payee=fund_account().shown(),
                          payee_digest=fund_account().digest, approver="ops_lead@example.com",
                          credential="approver-token:abc", sik="S" * 32, now=1)  # fmt: skip
    assert seq is not None
    allowed = g2_value.check(payout(), context(ledger, held))
    assert (allowed.verdict, allowed.reason_code) == (Verdict.ALLOW, "G2_WITHIN_VALUE")
    # A replaced mandate (any other hash) does not carry the amendment: held again, or refused under block.
    replaced = mandate("hold", **{"approval.hold_expiry_ms": 3_600_000})
    again = g2_value.check(payout(), context(ledger, replaced))
    assert (again.verdict, again.reason_code) == (Verdict.HOLD, "G2_PAYEE_UNLISTED_HELD")
    blocked = g2_value.check(payout(), context(ledger, mandate("block")))
    assert (blocked.verdict, blocked.reason_code) == (Verdict.BLOCK, "G2_PAYEE_NOT_ALLOWED")
    # Another agent's mandate version is not amended either.
    assert g2_value.check(replace(payout(), agent_id="agent_other"), context(ledger, held)).verdict is Verdict.HOLD
    # An inactive payee is refused even once added.
    inactive = g2_value.check(payout(payee=fund_account(active=False)), context(ledger, held))
    assert (inactive.verdict, inactive.reason_code) == (Verdict.BLOCK, "G2_PAYEE_INACTIVE")
