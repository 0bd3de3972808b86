"""RazorpayX payouts through the real engine (ADR 0028, SPEC §18): gate workers, the rail worker and the
reconciler as processes, the sandbox rail over HTTP, a mandate that grants create_payout to named payees.

What is pinned: the payee is judged as the rail knows it (on the list, active), the amount against the balance
less what the rail holds undebited; one payout per payee, amount and window however the agent repeats; the key
and the stamps the rail is sent; an ambiguous answer settled by reading the rail, never by sending a second.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from interlock.errors import OperatorRefused
from ledger import lifecycle
from ops import holds
from ops.bundle import export_bundle, verify_bundle
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
from tests.engine.conftest import Engine
from tests.mandates import MERCHANT, write_mandate
from tests.ops.conftest import APPROVER_TOKEN, ops_context_for
from tests.procs import wait_until

_ids = itertools.count(1)
DAY_MS = 86_400_000


def _fund_account_id(tag: str) -> str:
    return f"fa_{tag}{os.getpid() % 10**5:05d}{next(_ids):08d}"  # fa_ and 14, as RazorpayX's ids are


@pytest.fixture
def payout_engine(engine_factory: Callable[..., Engine], tmp_path: Path) -> Callable[..., tuple[Engine, dict]]:
    """An engine whose mandate grants create_payout to two payees: one fund account by id, and every fund account
    of one contact; a third payee exists on the rail but on neither list."""

    def make(**mandate_changes: Any) -> tuple[Engine, dict[str, str]]:
        payees = {"listed": _fund_account_id("L"), "inactive": _fund_account_id("I"),
                  "by_contact": _fund_account_id("C"), "contact_bank": _fund_account_id("B"),
                  "stranger": _fund_account_id("S")}  # fmt: skip
        contact = f"cont_{os.getpid() % 10**5:05d}{next(_ids):09d}"
        changes: dict[str, Any] = {
            "scope.grants.create_payout": {
                "reversibility": "irreversible",
                "value": {"min_amount_minor": 100, "max_amount_minor": 1_000_000, "currencies": ["INR"]},
                "payees": {"fund_account_ids": [payees["listed"], payees["inactive"]], "contact_ids": [contact]},
            },
            "idempotency.create_payout": {"window_ms": DAY_MS},
            "rail.account_number": DEFAULT_ACCOUNT_NUMBER,
            **mandate_changes,
        }
        path = write_mandate(tmp_path / f"payout-mandate-{next(_ids)}.yaml", changes)
        # One host, one clock: no skew to allow between its processes (ADR 0032). With the default 5 s, a payout
        # applied within 5 s before the gate's balance read is counted again, and an exact fit is refused
        # G2_STALE_RAIL_READ until the allowance has passed — this file tests the arithmetic, not that wait.
        engine = engine_factory(env={"INTERLOCK_MANDATE": str(path), "INTERLOCK_CLOCK_SKEW_MS": "0"})
        engine.rail.add_fund_account(payees["listed"])
        engine.rail.add_fund_account(payees["inactive"], active=False)
        engine.rail.add_fund_account(payees["by_contact"], account_type="vpa", contact={"id": contact})
        engine.rail.add_fund_account(payees["contact_bank"], contact_id=contact)  # the same vendor's bank account
        engine.rail.add_fund_account(payees["stranger"])
        engine.rail.set_banking_balance(5_000_000)
        return engine, payees

    return make


def payout(fund_account_id: str, amount: int = 48_000, **extra: Any) -> dict[str, Any]:
    return {"fund_account_id": fund_account_id, "amount": amount, "currency": "INR", "mode": "IMPS",
            "purpose": "vendor bill", **extra}  # fmt: skip


def rail_payouts(engine: Engine, sik: str) -> list[dict[str, Any]]:
    return [e for e in engine.rail.entities("payout") if e["entity"].get("reference_id") == "ilk_" + sik]


def paid_to(engine: Engine, payees: dict[str, str]) -> list[str]:
    """The payouts on the rail to this test's payees (the sandbox is shared by the session's tests)."""
    ours = set(payees.values())
    return [e["entity"]["id"] for e in engine.rail.entities("payout") if e["entity"]["fund_account_id"] in ours]


def test_a_payout_to_a_listed_payee_is_sent_once_with_our_key_and_stamps(payout_engine) -> None:
    engine, payees = payout_engine()
    first = engine.outcome(engine.propose(payout(payees["listed"], narration="Invoice 7"), tool="create_payout"))
    assert (first.state, first.caller_action, first.replayed) == ("APPLIED", "DONE", False), first
    assert first.sik is not None and first.rail_entity_id and first.rail_entity_id.startswith("pout_")
    assert first.intent is not None and first.intent.subject == payees["listed"]
    # The agent repeats with other notes, narration and mode: the same payee, amount and window is that payout.
    for extra in ({"notes": {"try": "2"}}, {"narration": "Invoice 7 again", "mode": "NEFT"}):
        again = engine.outcome(engine.propose(payout(payees["listed"], **extra), tool="create_payout"))
        assert (again.state, again.replayed, again.sik, again.rail_entity_id) == (
            "APPLIED", True, first.sik, first.rail_entity_id)  # fmt: skip
    [sent] = rail_payouts(engine, first.sik)
    assert sent["idempotency_key"] == first.sik
    body = sent["request"]["body"]
    assert body["notes"]["interlock_sik"] == first.sik and body["narration"] == "Invoice 7"
    assert body["account_number"] == DEFAULT_ACCOUNT_NUMBER and body["queue_if_low_balance"] is False
    # A genuine second payout says why; it is another operation with another key.
    second = engine.outcome(engine.propose(payout(payees["listed"], interlock_distinct_reason="invoice 8"),
                                           tool="create_payout"))  # fmt: skip
    assert second.state == "APPLIED" and second.sik != first.sik and second.rail_entity_id != first.rail_entity_id


def test_a_payee_of_a_listed_contact_is_paid_and_one_on_no_list_is_blocked(payout_engine) -> None:
    engine, payees = payout_engine()
    by_contact = engine.outcome(engine.propose(payout(payees["by_contact"], mode="UPI"), tool="create_payout"))
    assert by_contact.state == "APPLIED", by_contact
    stranger = engine.outcome(engine.propose(payout(payees["stranger"]), tool="create_payout"))
    assert (stranger.state, stranger.reason_code) == ("BLOCKED", "G2_PAYEE_NOT_ALLOWED")
    inactive = engine.outcome(engine.propose(payout(payees["inactive"]), tool="create_payout"))
    assert (inactive.state, inactive.reason_code) == ("BLOCKED", "G2_PAYEE_INACTIVE")
    missing = engine.outcome(engine.propose(payout("fa_NOSUCHPAYEE000"), tool="create_payout"))
    assert (missing.state, missing.reason_code) == ("BLOCKED", "G2_PAYEE_NOT_FOUND")
    assert len(paid_to(engine, payees)) == 1


def test_the_balance_less_payouts_waiting_on_the_rail_bounds_a_payout(payout_engine) -> None:
    engine, payees = payout_engine()
    engine.rail.set_banking_balance(60_000)
    first = engine.outcome(engine.propose(payout(payees["listed"], 50_000), tool="create_payout"))
    assert first.state == "APPLIED"  # 60,000 - 50,000 - 590 of fees left: 9,410
    # The next payout's own fee (590) is debited beside it: 8,821 + 590 is one paisa too many, 8,820 fits exactly.
    over = engine.outcome(engine.propose(payout(payees["listed"], 8_821), tool="create_payout"))
    assert (over.state, over.reason_code) == ("BLOCKED", "G2_EXCEEDS_PAYOUT_BALANCE")
    fits = engine.outcome(engine.propose(payout(payees["listed"], 8_820), tool="create_payout"))
    assert fits.state == "APPLIED", fits
    assert len(paid_to(engine, payees)) == 2


def test_an_ambiguous_payout_is_found_by_its_reference_and_never_sent_twice(payout_engine) -> None:
    engine, payees = payout_engine()
    engine.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
    outcome = engine.outcome(engine.propose(payout(payees["listed"], 30_000), tool="create_payout"))
    assert (outcome.state, outcome.caller_action) == ("UNKNOWN", "RETRY_SAME_CALL"), outcome
    assert outcome.sik is not None
    engine.rail.clear_faults()
    intent = engine.settle(outcome.sik, {"APPLIED"})
    [real] = rail_payouts(engine, outcome.sik)
    assert intent.rail_entity_id == real["entity"]["id"]
    again = engine.outcome(engine.propose(payout(payees["listed"], 30_000), tool="create_payout"))
    assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, real["entity"]["id"])
    assert len(rail_payouts(engine, outcome.sik)) == 1


def test_a_payout_never_applied_is_retried_under_the_same_key(payout_engine) -> None:
    engine, payees = payout_engine()
    engine.rail.set_faults([{"name": "fail_504", "rate": 1.0}])
    outcome = engine.outcome(engine.propose(payout(payees["listed"], 20_000), tool="create_payout"))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.clear_faults()
    intent = engine.settle(outcome.sik, {"APPLIED"}, timeout_s=45)
    [real] = rail_payouts(engine, outcome.sik)
    assert intent.rail_entity_id == real["entity"]["id"] and real["idempotency_key"] == outcome.sik
    conn = engine.ledger()
    attempts = conn.execute("SELECT attempt_seq, outcome, request_json FROM intent_attempts WHERE sik = ? "
                            "ORDER BY attempt_seq", (outcome.sik,)).fetchall()  # fmt: skip
    conn.close()
    assert [a[1] for a in attempts] == ["AMBIGUOUS", "APPLIED"]
    assert attempts[0][2] == attempts[1][2]  # the same body and key on the retry (SPEC §14)


def test_a_held_payout_is_judged_again_against_the_payee_and_balance_now(payout_engine, monkeypatch) -> None:
    engine, payees = payout_engine()
    held = engine.outcome(engine.propose(payout(payees["listed"], 350_000), tool="create_payout"))
    assert (held.state, held.caller_action) == ("HELD", "WAIT_FOR_APPROVAL"), held
    assert held.sik is not None
    ops = ops_context_for(engine, monkeypatch)
    approver = ops.approvers().authenticate(APPROVER_TOKEN)
    assert approver is not None

    def approve() -> holds.Released:
        intent = engine.intent(held.sik)
        assert intent is not None
        return holds.approve(ops, held.sik, reason="invoice checked", approver=approver,
                             terms_digest=holds.terms_digest(intent))  # fmt: skip

    engine.rail.set_banking_balance(300_000)
    with pytest.raises(OperatorRefused, match=r"G2_EXCEEDS_PAYOUT_BALANCE: the held 3,500.00 INR no longer fits"):
        approve()
    engine.rail.set_banking_balance(5_000_000)
    approve()
    intent = engine.settle(held.sik, {"APPLIED"})
    [real] = rail_payouts(engine, held.sik)
    assert intent.rail_entity_id == real["entity"]["id"]


def test_a_queued_payout_is_cancelled_on_the_rail_when_its_mandate_is_replaced(payout_engine) -> None:
    engine, payees = payout_engine(**{"scope.grants.create_payout.queue_if_low_balance": True})
    engine.rail.set_banking_balance(1_000)  # the rail cannot pay for it yet: it waits queued
    queued = engine.outcome(engine.propose(payout(payees["listed"], 40_000), tool="create_payout"))
    assert queued.state == "APPLIED" and queued.sik is not None, queued
    [real] = rail_payouts(engine, queued.sik)
    assert real["entity"]["status"] == "queued" and real["request"]["body"]["queue_if_low_balance"] is True
    # A person replaces the mandate (a smaller maximum): the reconciler, restarted with it, cancels the payout.
    path = Path(engine.stack.env["INTERLOCK_MANDATE"])
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["scope"]["grants"]["create_payout"]["value"]["max_amount_minor"] = 200_000
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    engine.stack.restart("reconciler")

    def cancelled() -> bool:
        return [e["entity"]["status"] for e in rail_payouts(engine, queued.sik)] == ["cancelled"]

    wait_until(cancelled, timeout=30, what="the queued payout to be cancelled on the rail")
    engine.rail.set_banking_balance(5_000_000)  # a top-up now pays for nothing of ours
    conn = engine.ledger()
    try:
        status = lifecycle.current(conn, MERCHANT, queued.sik)
        assert status is not None and (status.status, status.attention) == ("cancelled", "PAYOUT_NOT_PAID")
        records = [json.loads(r[0]) for r in conn.execute(
            "SELECT payload_json FROM audit_log WHERE kind = 'PAYOUT_CANCELLED'")]  # fmt: skip
        assert [(r["sik"], r["reason"]) for r in records] == [(queued.sik, "MANDATE_REPLACED")]
    finally:
        conn.close()
    assert [e["entity"]["status"] for e in rail_payouts(engine, queued.sik)] == ["cancelled"]


def test_a_refused_payout_repeated_with_a_corrected_mode_is_sent_as_corrected_under_a_new_key(payout_engine) -> None:
    engine, payees = payout_engine()
    wrong = engine.outcome(engine.propose(payout(payees["listed"], 21_000, mode="UPI"), tool="create_payout"))
    assert wrong.state == "FAILED_TERMINAL" and wrong.sik is not None, wrong  # UPI to a bank account: refused
    fixed = engine.outcome(engine.propose(payout(payees["listed"], 21_000, mode="IMPS"), tool="create_payout"))
    assert (fixed.state, fixed.sik) == ("APPLIED", wrong.sik), fixed
    [sent] = rail_payouts(engine, wrong.sik)
    assert sent["request"]["body"]["mode"] == "IMPS" and sent["idempotency_key"] == f"{wrong.sik}-1"


def test_one_contact_s_bank_account_and_upi_id_are_one_payee(payout_engine, tmp_path: Path) -> None:
    """"The IMPS did not go through, try their UPI id": the vendor is one payee however many fund accounts it has,
    so the same amount in the window is that payout — and a refused first try is sent to the account the repeat
    named (ADR 0028 amendment)."""
    engine, payees = payout_engine(**{"limits.windows": [
        {"window_ms": DAY_MS, "max_calls": 40, "max_amount_minor": 5_000_000, "currency": "INR"},
        {"window_ms": DAY_MS, "max_calls": 2, "currency": "INR", "tool": "create_payout", "per_subject": True},
    ]})  # fmt: skip
    wrong = engine.outcome(engine.propose(payout(payees["contact_bank"], 26_000, mode="UPI"), tool="create_payout"))
    assert wrong.state == "FAILED_TERMINAL" and wrong.sik is not None, wrong  # UPI to a bank account: refused
    upi = engine.outcome(engine.propose(payout(payees["by_contact"], 26_000, mode="UPI"), tool="create_payout"))
    assert (upi.state, upi.sik) == ("APPLIED", wrong.sik), upi
    [sent] = rail_payouts(engine, wrong.sik)
    assert sent["entity"]["fund_account_id"] == payees["by_contact"] and sent["idempotency_key"] == f"{wrong.sik}-1"
    intent = engine.intent(wrong.sik)
    assert intent is not None and intent.subject_id == payees["by_contact"]
    # Told to try the bank account again (IMPS this time): the vendor was paid; the answer is that payout.
    bank = engine.outcome(engine.propose(payout(payees["contact_bank"], 26_000), tool="create_payout"))
    assert (bank.state, bank.replayed, bank.rail_entity_id) == ("APPLIED", True, upi.rail_entity_id), bank
    assert len(paid_to(engine, payees)) == 1
    # The payee's own window counts the contact, whichever account a call names: one more call, then refused.
    second = engine.outcome(engine.propose(payout(payees["contact_bank"], 9_000), tool="create_payout"))
    assert second.state == "APPLIED", second
    third = engine.outcome(engine.propose(payout(payees["by_contact"], 7_000, mode="UPI"), tool="create_payout"))
    assert (third.state, third.reason_code) == ("BLOCKED", "G3_WINDOW_CALLS"), third
    other = engine.outcome(engine.propose(payout(payees["listed"], 7_000), tool="create_payout"))
    assert other.state == "APPLIED", other  # another payee's window is its own
    # The reopening that moved the payout to the UPI id is on the audit chain: an exported bundle verifies.
    conn = engine.ledger()
    try:
        export_bundle(conn, tmp_path / "bundle")
    finally:
        conn.close()
    report = verify_bundle(tmp_path / "bundle")
    assert report.ok, report.problems
