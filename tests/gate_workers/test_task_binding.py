"""Task binding in the ladder and at admit (SPEC §10): G1 refuses an untrusted task, a missing required one and a
tool the task does not grant; G2 refuses a subject, order or customer outside it; the task's ceiling caps the SUM
under its task_id, re-asserted by the rail worker's admit — and a refused call records no intent."""

from __future__ import annotations

import base64
import itertools
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gate_workers.context import ResolvedAction
from gate_workers.jobs import build_decision
from gate_workers.task_binding import bind_task
from interlock.clock import now_ms
from interlock.mandate import Mandate, MandateStore
from interlock.messages import Decision, Proposal, Verdict
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY, new_task, public_key_b64, sign_task
from ledger.intents import get_intent
from rail_worker.admit import admit
from rail_worker.runtime import RailRuntime
from rails.models import Payment
from tests.gate_workers.factories import context, payment, refund_action, settlement_action
from tests.mandates import AGENT, MERCHANT, make_mandate

KEY = Ed25519PrivateKey.generate()
B, A = Verdict.BLOCK, Verdict.ALLOW
ROOMY = {"limits.windows": [], "approval.hold_above_minor": None}
_ids = itertools.count(1)


def task_mandate(binding: str = "optional", **changes: Any) -> Mandate:
    return make_mandate({**ROOMY, "task_binding": binding, "task_signers": {"ticketing": public_key_b64(KEY)},
                         **changes})  # fmt: skip


def mine(amount: int = 500_000, pid: str = "pay_MINE1") -> Payment:
    raw = {"id": pid, "entity": "payment", "amount": amount, "currency": "INR", "status": "captured",
           "amount_refunded": 0, "captured": True, "notes": [], "order_id": "order_1002", "customer_id": "cust_Asha"}
    result: Payment = Payment.from_raw(raw)
    return result


def meta(tool: str = "create_refund", *, key: Ed25519PrivateKey = KEY, expires_at: int | None = None,
         task_id: str = "ticket-4711", **grant: Any) -> dict[str, Any]:  # fmt: skip
    grant = {"subjects": ["pay_MINE1"], **grant}
    task = new_task(task_id, expires_at or now_ms() + 3_600_000, tool, merchant_id=MERCHANT, agent_ids=[AGENT], **grant)
    return sign_task(task, key, "ticketing")


def decided(rt_or_ledger: Any, mandate: Mandate, action: ResolvedAction, task_meta: dict[str, Any] | None) -> Decision:
    """What a gate worker decides for *action* with *task_meta* in the call's `_meta` (the real bind and ladder)."""
    ledger = rt_or_ledger.ledger if isinstance(rt_or_ledger, RailRuntime) else rt_or_ledger
    task_meta = task_meta or {}
    request_id = f"req_{next(_ids)}"
    proposal = Proposal(request_id=request_id, agent_id=AGENT, merchant_id=MERCHANT, tool=action.tool,
                        arguments=action.arguments, task=task_meta.get(TASK_META_KEY),
                        task_sig=task_meta.get(TASK_SIG_META_KEY), received_at_ms=now_ms())  # fmt: skip
    now = now_ms()
    bound = bind_task(replace(action, request_id=request_id), proposal, mandate, now)
    return build_decision(bound, context(ledger, mandate, now=now), mandate)


def refund(amount: int, pay: Payment | None = None, distinct: str | None = None) -> ResolvedAction:
    return refund_action(amount, pay=pay or mine(), distinct=distinct)


# -- G1 --------------------------------------------------------------------------------------------------------


def test_a_tool_the_task_does_not_grant_is_blocked(ledger: Any) -> None:
    decision = decided(ledger, task_mandate(), settlement_action(100_000), meta("create_refund"))
    assert (decision.verdict, decision.reason_code) == (B, "G1_TOOL_NOT_IN_TASK")


def test_required_binding_blocks_a_money_call_without_a_task(ledger: Any) -> None:
    decision = decided(ledger, task_mandate("required"), refund(50_000), None)
    assert (decision.verdict, decision.reason_code) == (B, "G1_TASK_REQUIRED")
    assert decided(ledger, task_mandate("optional"), refund(50_000), None).verdict is A


def test_binding_off_ignores_a_task_even_a_forged_one(ledger: Any) -> None:
    forged = meta(key=Ed25519PrivateKey.generate())
    decision = decided(ledger, task_mandate("off"), refund(50_000, pay=mine(pid="pay_OTHER")), forged)
    assert decision.verdict is A and decision.task_id is None


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: meta(key=Ed25519PrivateKey.generate()), "G1_TASK_BAD_SIGNATURE"),
        (lambda: {**meta(), TASK_SIG_META_KEY: {**meta()[TASK_SIG_META_KEY], "signer": "nobody"}},
         "G1_TASK_UNKNOWN_SIGNER"),
        (lambda: meta(expires_at=now_ms() - 1), "G1_TASK_EXPIRED"),
        (lambda: {**meta(), TASK_SIG_META_KEY: {"signer": "ticketing",
                                                "sig": base64.b64encode(b"\x00" * 64).decode()}},
         "G1_TASK_BAD_SIGNATURE"),
        (lambda: tampered(meta(), max_amount_minor=10_000_000), "G1_TASK_BAD_SIGNATURE"),
    ],
)  # fmt: skip
def test_an_untrusted_task_blocks_and_records_no_intent(rail_rt: RailRuntime, make: Any, reason: str) -> None:
    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    decision = decided(rail_rt, mandate, refund(50_000), make())
    assert (decision.verdict, decision.reason_code) == (B, reason)
    admitted = admit(rail_rt, decision)
    assert admitted.execute is None and admitted.outcome is not None and admitted.outcome.state == "BLOCKED"
    assert decision.sik is not None and get_intent(rail_rt.ledger, MERCHANT, decision.sik) is None
    row = rail_rt.ledger.execute("SELECT reason_code FROM decisions WHERE request_id = ?",
                                 (decision.request_id,)).fetchone()  # fmt: skip
    assert row["reason_code"] == reason


def tampered(block: dict[str, Any], **grant: Any) -> dict[str, Any]:
    task = {**block[TASK_META_KEY]}
    task["grants"] = {"create_refund": {**task["grants"]["create_refund"], **grant}}
    return {**block, TASK_META_KEY: task}


# -- G2 --------------------------------------------------------------------------------------------------------


def test_a_subject_outside_the_task_is_blocked(ledger: Any) -> None:
    swapped = refund(50_000, pay=mine(pid="pay_OTHER"))  # A4: an injected note swapped the payment id
    decision = decided(ledger, task_mandate(), swapped, meta())
    assert (decision.verdict, decision.reason_code) == (B, "G2_SUBJECT_NOT_IN_TASK")


def test_a_payment_of_another_customer_or_order_is_blocked(ledger: Any) -> None:
    other: Payment = Payment.from_raw({**mine().raw, "customer_id": "cust_Vikram", "order_id": "order_9"})
    by_customer = decided(ledger, task_mandate(), refund(50_000, pay=other), meta(customer_id="cust_Asha"))
    assert (by_customer.verdict, by_customer.reason_code) == (B, "G2_CUSTOMER_MISMATCH")
    by_order = decided(ledger, task_mandate(), refund(50_000, pay=other), meta(order_id="order_1002"))
    assert (by_order.verdict, by_order.reason_code) == (B, "G2_ORDER_MISMATCH")
    right = decided(ledger, task_mandate(), refund(50_000), meta(customer_id="cust_Asha", order_id="order_1002"))
    assert right.verdict is A


def test_the_decision_carries_the_task_id_digest_and_ceiling(ledger: Any) -> None:
    block = meta(max_amount_minor=189_900)
    decision = decided(ledger, task_mandate(), refund(50_000), block)
    assert decision.verdict is A
    assert (decision.task_id, decision.task_ceiling_minor) == ("ticket-4711", 189_900)
    assert decision.task_digest is not None and len(decision.task_digest) == 64


def test_a_payment_without_order_or_customer_never_matches_a_task_naming_them(ledger: Any) -> None:
    bare = payment(500_000, pid="pay_MINE1")  # no order_id / customer_id on it
    decision = decided(ledger, task_mandate(), refund(50_000, pay=bare), meta(customer_id="cust_Asha"))
    assert decision.reason_code == "G2_CUSTOMER_MISMATCH"


# -- the ceiling on the sum (A-10, structuring) -----------------------------------------------------------------


def test_four_in_limit_refunds_under_one_task_cannot_pass_its_ceiling(rail_rt: RailRuntime) -> None:
    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    block = meta(max_amount_minor=200_000)
    outcomes = []
    for i in range(4):  # four refunds of Rs 600 split from one, each inside every mandate limit
        decision = decided(rail_rt, mandate, refund(60_000 + i, distinct=f"part {i}"), block)
        outcomes.append((decision.reason_code, admit(rail_rt, decision)))
    admitted = [a for _, a in outcomes if a.execute is not None]
    assert len(admitted) == 3  # 60,000 + 60,001 + 60,002 = 180,003 <= 200,000; the fourth crosses it
    reason, last = outcomes[3]
    assert reason == "G2_EXCEEDS_TASK_CEILING" and last.outcome is not None and last.outcome.state == "BLOCKED"
    rows = rail_rt.ledger.execute("SELECT COUNT(*), SUM(amount_minor) FROM intents WHERE task_id = ?",
                                  ("ticket-4711",)).fetchone()  # fmt: skip
    assert tuple(rows) == (3, 180_003)


def test_admit_re_asserts_the_ceiling_for_decisions_made_from_the_same_snapshot(rail_rt: RailRuntime) -> None:
    # Two gate workers judged all four before any was admitted: each saw an empty task and allowed it.
    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    block = meta(max_amount_minor=200_000)
    decisions = [decided(rail_rt, mandate, refund(60_000 + i, distinct=f"part {i}"), block) for i in range(4)]
    assert all(d.verdict is A for d in decisions)
    admissions = [admit(rail_rt, d) for d in decisions]
    assert [a.execute is not None for a in admissions] == [True, True, True, False]
    refused = admissions[3].outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G2_EXCEEDS_TASK_CEILING")
    assert get_intent(rail_rt.ledger, MERCHANT, decisions[3].sik or "") is None


def test_admit_refuses_a_task_that_expired_after_the_gate(rail_rt: RailRuntime) -> None:
    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    decision = decided(rail_rt, mandate, refund(50_000), meta())
    stale = decision.model_copy(update={"task_expires_at": now_ms() - 1})
    refused = admit(rail_rt, stale).outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G1_TASK_EXPIRED")


def test_the_intent_and_the_audit_log_record_the_task(rail_rt: RailRuntime) -> None:
    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    decision = decided(rail_rt, mandate, refund(50_000), meta(max_amount_minor=100_000))
    assert admit(rail_rt, decision).execute is not None
    intent = get_intent(rail_rt.ledger, MERCHANT, decision.sik or "")
    assert intent is not None
    assert (intent.task_id, intent.task_digest, intent.task_ceiling_minor) == (
        "ticket-4711", decision.task_digest, 100_000)  # fmt: skip
    kinds = {r["kind"]: r["payload_json"] for r in rail_rt.ledger.execute("SELECT kind, payload_json FROM audit_log")}
    assert decision.task_digest in kinds["DECISION"] and decision.task_digest in kinds["INTENT_PROPOSED"]
    row = rail_rt.ledger.execute("SELECT task_id, task_digest FROM decisions WHERE request_id = ?",
                                 (decision.request_id,)).fetchone()  # fmt: skip
    assert tuple(row) == ("ticket-4711", decision.task_digest)


def test_interlock_status_shows_the_task_a_call_was_bound_to(rail_rt: RailRuntime) -> None:
    from ingress.status import _lookup

    mandate = task_mandate()
    rail_rt.mandates = MandateStore({AGENT: mandate})
    bound = decided(rail_rt, mandate, refund(50_000), meta())
    unbound = decided(rail_rt, mandate, refund(40_000), None)
    assert admit(rail_rt, bound).execute is not None and admit(rail_rt, unbound).execute is not None
    status = _lookup(rail_rt.ledger_path, MERCHANT, bound.sik, None)
    assert status["task"] == {"task_id": "ticket-4711", "task_digest": bound.task_digest}
    assert "task" not in _lookup(rail_rt.ledger_path, MERCHANT, unbound.sik, None)


# -- the audience (issue 25 item 5: one merchant's ticket, replayed by another merchant's agent) -------------------

OTHER_MERCHANT, OTHER_AGENT = "acc_OTHER00001", "agent_other"


def decided_for(rt: RailRuntime, mandate: Mandate, amount: int, task_meta: dict[str, Any]) -> Decision:
    """What a gate worker decides for *mandate*'s agent presenting *task_meta* (its trusted identity stamped)."""
    request_id = f"req_{next(_ids)}"
    action = replace(refund_action(amount, pay=mine(), agent_id=mandate.agent_id, merchant_id=mandate.merchant_id),
                     request_id=request_id)
    proposal = Proposal(request_id=request_id, agent_id=mandate.agent_id, merchant_id=mandate.merchant_id,
                        tool=action.tool, arguments=action.arguments, task=task_meta[TASK_META_KEY],
                        task_sig=task_meta[TASK_SIG_META_KEY], received_at_ms=now_ms())  # fmt: skip
    now = now_ms()
    return build_decision(bind_task(action, proposal, mandate, now), context(rt.ledger, mandate, now=now), mandate)


def test_another_merchants_agent_cannot_spend_a_task_signed_for_merchant_a(rail_rt: RailRuntime) -> None:
    mine_m = task_mandate()
    theirs = task_mandate(agent_id=OTHER_AGENT, merchant_id=OTHER_MERCHANT, mandate_id="mnd_other")
    rail_rt.mandates = MandateStore({AGENT: mine_m, OTHER_AGENT: theirs})
    ticket = meta(max_amount_minor=100_000)  # for merchant A's agent: refund pay_MINE1, at most Rs 1,000 in total
    first = decided_for(rail_rt, mine_m, 100_000, ticket)
    assert first.verdict is A and admit(rail_rt, first).execute is not None
    replayed = decided_for(rail_rt, theirs, 100_000, ticket)
    assert (replayed.verdict, replayed.reason_code) == (B, "G1_TASK_WRONG_AUDIENCE")
    refused = admit(rail_rt, replayed).outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G1_TASK_WRONG_AUDIENCE")
    # The money outcome: Rs 1,000 under the Rs 1,000 ticket, all of it merchant A's.
    rows = rail_rt.ledger.execute("SELECT merchant_id, SUM(amount_minor) FROM intents GROUP BY merchant_id")
    assert [tuple(r) for r in rows] == [(MERCHANT, 100_000)]


def test_a_gate_that_let_a_wrong_audience_through_is_refused_at_admit(rail_rt: RailRuntime) -> None:
    mine_m = task_mandate()
    theirs = task_mandate(agent_id=OTHER_AGENT, merchant_id=OTHER_MERCHANT, mandate_id="mnd_other")
    rail_rt.mandates = MandateStore({AGENT: mine_m, OTHER_AGENT: theirs})
    allowed = decided_for(rail_rt, mine_m, 50_000, meta(max_amount_minor=100_000))
    # The same verified task fields on a Decision for merchant B's agent (a gate worker with the check missing).
    forged = decided_for(rail_rt, theirs, 50_000, meta()).model_copy(update={
        k: getattr(allowed, k) for k in ("task_id", "task_digest", "task_ceiling_minor", "task_expires_at",
                                         "task_signer", "task_merchant_id", "task_agent_ids")
    } | {"verdict": A, "reason_code": "ALLOWED"})  # fmt: skip
    refused = admit(rail_rt, forged).outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G1_TASK_WRONG_AUDIENCE")


def test_a_v1_task_is_refused_at_the_gate_with_a_message_to_re_sign_it(ledger: Any) -> None:
    v1 = new_task("ticket-v1", now_ms() + 3_600_000, "create_refund", subjects=["pay_MINE1"])  # no audience
    decision = decided(ledger, task_mandate(), refund(50_000), sign_task(v1, KEY, "ticketing"))
    assert (decision.verdict, decision.reason_code) == (B, "G1_TASK_WRONG_AUDIENCE")
    detail = next(r.detail for r in decision.results if r.reason_code == "G1_TASK_WRONG_AUDIENCE")
    assert "re-sign it as v2" in detail["error"]
