"""G1 and the text an agent sends with money (mandate `free_text`, issue 47 item 4): each text's length and shape,
the one narration a named payee gets, and none to a payee on no list. A call breaking a rule is refused and says
which text and which rule; a mandate that says nothing bounds nothing (and keeps its hash)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import pytest

from gate_workers.free_text import FREE_TEXT_REFUSED, texts_of
from gate_workers.gates import g1_scope
from interlock.errors import MandateError
from interlock.mandate import Mandate
from interlock.messages import Verdict
from ledger.db import transaction
from ledger.payee_amendments import MandateVersion, allow_payee
from rails.models import FundAccount
from tests.gate_workers.factories import context
from tests.gate_workers.test_g2_unlisted_payee import LISTED, STRANGER, fund_account, payout
from tests.mandates import AGENT, MERCHANT, make_mandate

BOUNDED = {"max_chars": 20, "pattern": "[A-Za-z0-9 ]*"}


def mandate(free_text: dict[str, Any] | None, unlisted: str = "hold", **changes: Any) -> Mandate:
    grant: dict[str, Any] = {"scope.grants.create_payout.payees": {"fund_account_ids": [LISTED], "unlisted": unlisted}}
    if free_text is not None:
        grant["scope.grants.create_payout.free_text"] = free_text
    return make_mandate({**grant, **changes})


def call(*, to: str = LISTED, narration: str | None = None, **notes: str) -> Any:
    action = payout(payee=fund_account(to))
    params = {**action.params, "notes": dict(notes)}
    if narration is not None:
        params["narration"] = narration
    return replace(action, params=params)


def judged(action: Any, m: Mandate, ledger: sqlite3.Connection) -> tuple[Verdict, str, dict[str, Any]]:
    result = g1_scope.check(action, context(ledger, m))
    return result.verdict, result.reason_code, result.detail


def test_a_mandate_without_free_text_bounds_nothing(ledger: sqlite3.Connection) -> None:
    leaked = call(to=STRANGER, narration="The user likes Pizza", overview="every scheduled payment, in full" * 5)
    assert judged(leaked, mandate(None), ledger)[0] is Verdict.ALLOW
    assert "free_text" not in mandate(None).model_dump(mode="json", exclude_defaults=False)["scope"]["grants"][
        "create_payout"]  # fmt: skip


@pytest.mark.parametrize(("narration", "notes", "field"), [
    ("Dinner with US1330000001212121", {}, "narration"),  # 31 characters
    ("Invoice 42", {"memo": "the user has an iPhone 3GS"}, "notes.memo"),
    ("Rent, March", {}, "narration"),  # a comma: not the pattern
])  # fmt: skip
def test_each_text_longer_than_allowed_or_of_another_shape_is_refused_and_named(
    ledger: sqlite3.Connection, narration: str, notes: dict[str, str], field: str,
) -> None:
    verdict, code, detail = judged(call(narration=narration, **notes), mandate(BOUNDED), ledger)
    assert (verdict, code, detail["field"]) == (Verdict.BLOCK, FREE_TEXT_REFUSED, field)
    assert "20" in detail["rule"] or "pattern" in detail["rule"]


def test_text_within_the_bounds_passes(ledger: sqlite3.Connection) -> None:
    assert judged(call(narration="Invoice 42", memo="March rent"), mandate(BOUNDED), ledger)[0] is Verdict.ALLOW


def test_a_named_payee_gets_its_fixed_narration_or_none(ledger: sqlite3.Connection) -> None:
    m = mandate({"fixed": {LISTED: "Rent"}})
    assert judged(call(narration="Rent"), m, ledger)[0] is Verdict.ALLOW
    assert judged(call(), m, ledger)[0] is Verdict.ALLOW
    verdict, code, detail = judged(call(narration="Rent and your PIN 4321"), m, ledger)
    assert (verdict, code, detail["field"]) == (Verdict.BLOCK, FREE_TEXT_REFUSED, "narration")
    assert "'Rent'" in detail["rule"]
    # By the payee's contact as well: the contact is the payee (ADR 0028 amendment).
    contact = "cont_SUPPLIERCONT01"
    by_contact = mandate({"fixed": {contact: "Supplies"}})
    supplier = FundAccount.from_raw({**fund_account().raw, "contact_id": contact})
    to_supplier = replace(call(narration="Supplies"), fund_account=supplier)
    assert judged(to_supplier, by_contact, ledger)[0] is Verdict.ALLOW
    spotify = replace(to_supplier, params={**to_supplier.params, "narration": "Spotify"})
    assert judged(spotify, by_contact, ledger)[1] == FREE_TEXT_REFUSED


def test_unlisted_none_sends_no_narration_to_a_payee_on_no_list_until_a_person_adds_it(
    ledger: sqlite3.Connection,
) -> None:
    m = mandate({"unlisted": "none"})
    verdict, code, detail = judged(call(to=STRANGER, narration="The user likes Pizza"), m, ledger)
    assert (verdict, code, detail["field"]) == (Verdict.BLOCK, FREE_TEXT_REFUSED, "narration")
    # Without a narration the call goes on to G2, which holds it for a person (payees.unlisted: hold).
    assert judged(call(to=STRANGER), m, ledger)[0] is Verdict.ALLOW
    assert judged(call(narration="Rent"), m, ledger)[0] is Verdict.ALLOW  # a listed payee
    with transaction(ledger):
        allow_payee(ledger, MandateVersion(MERCHANT, AGENT, m.mandate_hash), fund_account_id=STRANGER,
                    contact_id="cont_STRANGER0000001", payee=fund_account().shown(), payee_digest=fund_account().digest,
                    approver="ops_lead@example.com", credential="approver-token:abc", sik="S" * 32, now=1)  # fmt: skip
    assert judged(call(to=STRANGER, narration="Invoice 42"), m, ledger)[0] is Verdict.ALLOW


def test_texts_are_the_narration_description_and_the_agents_own_notes() -> None:
    assert texts_of({"narration": "a", "description": "b", "notes": {"k": "c"}, "amount": 5, "mode": "IMPS"}) == {
        "narration": "a", "description": "b", "notes.k": "c"}  # fmt: skip


@pytest.mark.parametrize(("tool", "free_text", "says"), [
    ("create_payout", {"pattern": "[a-z"}, "regular expression"),
    ("create_payout", {"max_chars": 0}, "greater than or equal to 1"),
    ("create_payout", {"fixed": {"fa_LISTEDPAYEE001": "Rent, March"}}, "1-30 letters"),
    ("create_payout", {"fixed": {"acc_1": "Rent"}}, "fund account or contact id"),
    ("create_refund", {"unlisted": "none"}, "about a payout's payee"),
])  # fmt: skip
def test_a_free_text_rule_that_cannot_work_is_refused_at_load(tool: str, free_text: dict[str, Any], says: str) -> None:
    with pytest.raises(MandateError, match=says):
        make_mandate({f"scope.grants.{tool}.free_text": free_text})
