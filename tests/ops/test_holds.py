"""Approving and rejecting held calls: an approval binds to one call's exact terms, comes from an approver
the mandate names, before the hold expires, once — and then moves money exactly once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from interlock.errors import OperatorRefused
from ledger import audit
from ledger.states import State
from ops import holds
from tests.mandates import write_mandate
from tests.ops.conftest import APPROVER, APPROVER_TOKEN, HELD_AMOUNT, OTHER_TOKEN, Operated, ops_context_for


def _audit_of(operated: Operated, sik: str) -> list[dict]:
    conn = operated.engine.ledger()
    try:
        assert audit.verify_chain(conn) is None
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE json_extract(payload_json, '$.sik') = ? "
                            "ORDER BY seq", (sik,)).fetchall()  # fmt: skip
        return [json.loads(r[0]) for r in rows]
    finally:
        conn.close()


def test_approve_moves_money_exactly_once_and_records_who_and_why(operated: Operated) -> None:
    pid, sik = operated.held()
    assert [i.sik for i in holds.list_holds(operated.ops)] == [sik]
    released = operated.approve(sik, reason="customer charged twice, ticket 4411",
                                expected=holds.Expected(amount_minor=HELD_AMOUNT, subject=pid))  # fmt: skip
    assert released.intent.state is State.AUTHORIZED and released.enqueued
    intent = operated.engine.settle(sik, {"APPLIED"})
    assert operated.engine.rail.count_stamped(sik) == 1
    assert [r["entity"]["id"] for r in operated.refunds_of(pid)] == [intent.rail_entity_id]
    release = [p for p in _audit_of(operated, sik) if p.get("event") == "HOLD_RELEASED"]
    assert len(release) == 1 and release[0]["actor"] == APPROVER
    assert release[0]["detail"]["reason"] == "customer charged twice, ticket 4411"
    assert release[0]["detail"]["approved_terms"]["amount_minor"] == HELD_AMOUNT
    # The agent's retry of the same call sees the outcome, and nothing moves again.
    again = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT}))
    assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, intent.rail_entity_id)
    with pytest.raises(OperatorRefused, match="not HELD"):
        operated.approve(sik, reason="again")
    assert operated.engine.rail.count_stamped(sik) == 1


def test_approval_by_someone_the_mandate_does_not_name_is_refused(operated: Operated) -> None:
    pid, sik = operated.held()
    with pytest.raises(OperatorRefused, match="'mallory@example.com' is not an approver of mandate mnd_demo_support"):
        operated.approve(sik, approver=operated.approver(OTHER_TOKEN), reason="trust me")
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    assert operated.refunds_of(pid) == []


def test_approval_after_the_hold_expired_is_refused_and_blocks_the_call(operated: Operated) -> None:
    pid, sik = operated.held()
    intent = operated.engine.intent(sik)
    assert intent is not None and intent.hold_expires_at is not None
    with pytest.raises(OperatorRefused, match="hold expired"):
        operated.approve(sik, reason="late", now=intent.hold_expires_at)
    blocked = operated.engine.intent(sik)
    assert blocked is not None and (blocked.state, blocked.reason_code) == (State.BLOCKED, "HOLD_EXPIRED")
    with pytest.raises(OperatorRefused, match="not HELD"):
        operated.approve(sik, reason="later still")
    assert operated.refunds_of(pid) == []
    again = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT}))
    assert (again.state, again.reason_code, again.caller_action) == ("BLOCKED", "HOLD_EXPIRED", "DO_NOT_RETRY")


def test_the_sweep_blocks_every_expired_hold(operated: Operated) -> None:
    _, first = operated.held()
    _, second = operated.held(amount=HELD_AMOUNT + 1)
    latest = max(operated.engine.intent(s).hold_expires_at for s in (first, second))  # type: ignore[union-attr,type-var]
    assert {i.sik for i in holds.sweep_expired(operated.ops, now=latest)} == {first, second}
    assert holds.list_holds(operated.ops) == []


def test_approval_for_changed_terms_is_refused_and_a_changed_call_is_a_new_hold(operated: Operated) -> None:
    pid, sik = operated.held(payment_amount=800_000)  # room for both holds: G2 counts a HELD call's money
    with pytest.raises(OperatorRefused, match="amount_minor 350001 .* has 350000"):
        operated.approve(sik, reason="ok", expected=holds.Expected(amount_minor=HELD_AMOUNT + 1))
    with pytest.raises(OperatorRefused, match="terms digest"):
        operated.approve(sik, reason="ok", terms_digest="0" * 16)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]
    # Approving one call does not let a different amount on the same payment through: that is another intent.
    bigger = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT + 50_000}))
    assert bigger.state == "HELD" and bigger.sik not in (None, sik)
    operated.approve(sik, reason="the one I checked")
    operated.engine.settle(sik, {"APPLIED"})
    assert operated.engine.intent(bigger.sik).state is State.HELD  # type: ignore[arg-type,union-attr]
    assert [r["entity"]["amount"] for r in operated.refunds_of(pid)] == [HELD_AMOUNT]


def test_approval_under_a_changed_mandate_is_refused(operated: Operated, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _, sik = operated.held()
    changed = write_mandate(tmp_path / "changed.yaml", {"approval.hold_above_minor": 250_000})
    ops = ops_context_for(operated.engine, monkeypatch, INTERLOCK_MANDATE=str(changed))
    with pytest.raises(OperatorRefused, match="binds to the mandate the call was judged under"):
        operated.approve(sik, reason="ok", ops=ops)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_an_approver_named_by_a_mandate_for_another_merchant_decides_nothing_of_this_one(
    operated: Operated, tmp_path, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """Issue 46 item 3: the agent's mandate now is for another merchant; the approver it names is that merchant's,
    and may neither approve nor reject a hold of this one (a rejection was not checked for this before)."""
    _, sik = operated.held()
    moved = write_mandate(tmp_path / "moved.yaml", {"merchant_id": "acc_ELSEWHERE001"})
    ops = ops_context_for(operated.engine, monkeypatch, INTERLOCK_MANDATE=str(moved))
    refusal = "mandate mnd_demo_support is for merchant acc_ELSEWHERE001, not acc_DEMO000001; nobody it names"
    with pytest.raises(OperatorRefused, match=refusal):
        holds.reject(ops, sik, approver=operated.approver(), reason="not ours")
    with pytest.raises(OperatorRefused, match=refusal):
        operated.approve(sik, reason="ok", ops=ops)
    assert operated.engine.intent(sik).state is State.HELD  # type: ignore[union-attr]


def test_reject_blocks_the_call_and_nothing_moves(operated: Operated) -> None:
    pid, sik = operated.held()
    with pytest.raises(OperatorRefused, match="needs a reason"):
        holds.reject(operated.ops, sik, approver=operated.approver(), reason=" ")
    with pytest.raises(OperatorRefused, match="not an approver"):
        holds.reject(operated.ops, sik, approver=operated.approver(OTHER_TOKEN), reason="no")
    intent = holds.reject(operated.ops, sik, approver=operated.approver(), reason="not a duplicate charge")
    assert (intent.state, intent.reason_code) == (State.BLOCKED, "HOLD_REJECTED")
    rejected = [p for p in _audit_of(operated, sik) if p.get("event") == "HOLD_REJECTED"]
    assert rejected[0]["actor"] == APPROVER and rejected[0]["detail"]["reason"] == "not a duplicate charge"
    with pytest.raises(OperatorRefused, match="not HELD"):
        operated.approve(sik, reason="changed my mind")
    again = operated.engine.outcome(operated.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT}))
    assert (again.state, again.replayed) == ("BLOCKED", True)
    assert operated.refunds_of(pid) == [] and operated.engine.rail.count_stamped(sik) == 0


def test_the_cli_lists_refuses_and_approves(operated: Operated) -> None:
    _, sik = operated.held()
    env = operated.engine.stack.base_env()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "interlock.cli", *args], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    listed = cli("holds", "list")
    assert listed.returncode == 0 and sik in listed.stdout and "3,500.00 INR" in listed.stdout
    terms = ("--terms", operated.digest(sik))
    env.update(INTERLOCK_APPROVERS=str(operated.ops.settings.approvers), INTERLOCK_APPROVER_TOKEN=OTHER_TOKEN)
    refused = cli("holds", "approve", sik, "--as", "mallory@example.com", *terms)
    assert refused.returncode == 2 and "is not an approver" in refused.stderr
    env["INTERLOCK_APPROVER_TOKEN"] = APPROVER_TOKEN
    approved = cli("holds", "approve", sik, "--as", APPROVER, *terms, "--amount", str(HELD_AMOUNT), "--reason",
                   "checked")  # fmt: skip
    assert approved.returncode == 0 and "handed to the rail worker" in approved.stdout, approved.stderr
    operated.engine.settle(sik, {"APPLIED"})
    assert operated.engine.rail.count_stamped(sik) == 1
