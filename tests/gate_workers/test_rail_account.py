"""One rail key reaches one rail account (issue 25, item 8; ADR 0021): a mandate names its account, a call whose
mandate names another account than the credentials reach is refused by the gate and again at admit, and every
merchant on one account shares one G2 count — together they cannot refund more than the payment allows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gate_workers.jobs import build_decision
from interlock.clock import now_ms
from interlock.errors import MandateError
from interlock.mandate import Mandate, MandateStore
from interlock.messages import Decision, Verdict
from rail_worker.admit import admit
from rail_worker.runtime import RailRuntime
from rails.models import Payment
from tests.gate_workers.factories import context, refund_action
from tests.mandates import make_mandate

ACCOUNT = "acc_SHARED0001"
ROOMY = {"limits.windows": [], "approval.hold_above_minor": None, "limits.fee_budgets": {}}
_ids = iter(range(1, 10_000))


NO_PAYOUTS = ("rail", "scope.grants.create_payout", "idempotency.create_payout")


def mandate(merchant: str, agent: str, account: str | None = ACCOUNT) -> Mandate:
    changes: dict[str, Any] = {**ROOMY, "merchant_id": merchant, "agent_id": agent, "mandate_id": f"mnd_{agent}"}
    if account is not None:
        changes["rail.account_id"] = account
        return make_mandate(changes)
    # The example names the RazorpayX account its payouts come from: without payouts, a mandate names no account.
    return make_mandate(changes, drop=NO_PAYOUTS)


def pay(amount: int = 100_000) -> Payment:
    result: Payment = Payment.from_raw({"id": "pay_SHARED01", "entity": "payment", "amount": amount, "currency": "INR",
                                        "status": "captured", "amount_refunded": 0, "captured": True, "notes": []})
    return result


def decide(rt: RailRuntime, m: Mandate, amount: int) -> Decision:
    """A gate worker's decision for *m*'s agent refunding *amount* of the shared payment (the real ladder)."""
    action = replace(refund_action(amount, pay=pay(), agent_id=m.agent_id, merchant_id=m.merchant_id),
                     request_id=f"req_{next(_ids)}")
    ctx = context(rt.ledger, m, now=now_ms(), rail_account_id=rt.mandates.rail_account_id,
                  account_merchants=rt.mandates.account_merchants(m))  # fmt: skip
    return build_decision(action, ctx, m)


def refunded(rt: RailRuntime) -> int:
    row = rt.ledger.execute("SELECT COALESCE(SUM(amount_minor), 0) FROM intents WHERE subject_id = 'pay_SHARED01'")
    return int(row.fetchone()[0])


@pytest.mark.parametrize("account", [ACCOUNT, None], ids=["named-account", "unnamed-one-key"])
def test_two_merchants_on_one_rail_account_cannot_refund_more_than_the_payment_together(
    rail_rt: RailRuntime, account: str | None
) -> None:
    a, b = mandate("acc_MERCHANTA1", "agent_a", account), mandate("acc_MERCHANTB1", "agent_b", account)
    rail_rt.mandates = MandateStore({"agent_a": a, "agent_b": b}, rail_account_id=account)
    first = decide(rail_rt, a, 60_000)
    assert first.verdict is Verdict.ALLOW and admit(rail_rt, first).execute is not None
    # Merchant B's gate sees merchant A's Rs 600 in motion on the same payment of the same account.
    second = decide(rail_rt, b, 60_000)
    assert (second.verdict, second.reason_code) == (Verdict.BLOCK, "G2_EXCEEDS_REFUNDABLE")
    admit(rail_rt, second)
    assert refunded(rail_rt) == 60_000


def test_admit_counts_every_merchant_on_the_account_for_decisions_from_one_snapshot(rail_rt: RailRuntime) -> None:
    a, b = mandate("acc_MERCHANTA1", "agent_a"), mandate("acc_MERCHANTB1", "agent_b")
    rail_rt.mandates = MandateStore({"agent_a": a, "agent_b": b}, rail_account_id=ACCOUNT)
    # Both gates judged before either was admitted: each saw the whole Rs 1,000 refundable.
    decisions = [decide(rail_rt, a, 60_000), decide(rail_rt, b, 60_000)]
    assert all(d.verdict is Verdict.ALLOW for d in decisions)
    admissions = [admit(rail_rt, d) for d in decisions]
    assert admissions[0].execute is not None and admissions[1].execute is None
    refused = admissions[1].outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G2_EXCEEDS_REFUNDABLE")
    assert refunded(rail_rt) == 60_000  # never more than the payment's Rs 1,000, and only one of them moved


def test_merchants_on_different_accounts_keep_their_own_counts() -> None:
    a, b = mandate("acc_MERCHANTA1", "agent_a"), mandate("acc_MERCHANTB1", "agent_b", "acc_ELSEWHERE1")
    store = MandateStore({"agent_a": a, "agent_b": b}, rail_account_id=ACCOUNT)
    assert store.account_merchants(a) == ("acc_MERCHANTA1",)
    assert store.account_merchants(b) == ("acc_MERCHANTB1",)


def test_a_merchant_s_mandate_for_another_account_does_not_shrink_its_legitimate_mandates_count() -> None:
    """Finding F-acct-1 (docs/simulation.md; seeds 1682 and 6068 of `make simulate`): one merchant had a second
    mandate naming the other shard's account (refused at G1, but its merchants were asked first). The store
    remembered the answer per merchant, so the merchant's own mandate then counted only itself: a payout was admitted
    against a balance another merchant's payout had already taken, and the rail refused it."""
    a, b = mandate("acc_MERCHANTA1", "agent_a"), mandate("acc_MERCHANTB1", "agent_b")
    stray = mandate("acc_MERCHANTA1", "agent_ax", "acc_ELSEWHERE1")
    store = MandateStore({"agent_a": a, "agent_b": b, "agent_ax": stray}, rail_account_id=ACCOUNT)
    assert store.account_merchants(stray) == ("acc_MERCHANTA1",)
    assert store.account_merchants(a) == ("acc_MERCHANTA1", "acc_MERCHANTB1")


@pytest.mark.parametrize(("named", "configured"), [("acc_ELSEWHERE1", ACCOUNT), ("acc_ELSEWHERE1", None),
                                                   (None, ACCOUNT)])  # fmt: skip
def test_a_mandate_for_another_account_than_the_credentials_reach_is_refused_at_gate_and_admit(
    rail_rt: RailRuntime, named: str | None, configured: str | None
) -> None:
    m = mandate("acc_MERCHANTA1", "agent_a", named)
    rail_rt.mandates = MandateStore({"agent_a": m}, rail_account_id=configured)
    decision = decide(rail_rt, m, 10_000)
    assert (decision.verdict, decision.reason_code) == (Verdict.BLOCK, "G1_RAIL_ACCOUNT_MISMATCH")
    # A gate worker that let it through (configured without the account, say): the admit refuses it too.
    forged = decision.model_copy(update={"verdict": Verdict.ALLOW, "reason_code": "ALLOWED"})
    refused = admit(rail_rt, forged).outcome
    assert refused is not None and (refused.state, refused.reason_code) == ("BLOCKED", "G1_RAIL_ACCOUNT_MISMATCH")
    assert refunded(rail_rt) == 0


def test_a_mandate_on_the_credentials_account_is_allowed(rail_rt: RailRuntime) -> None:
    m = mandate("acc_MERCHANTA1", "agent_a")
    rail_rt.mandates = MandateStore({"agent_a": m}, rail_account_id=ACCOUNT)
    decision = decide(rail_rt, m, 10_000)
    assert decision.verdict is Verdict.ALLOW and admit(rail_rt, decision).execute is not None


def test_a_money_mandate_without_an_account_is_refused_at_load_once_the_deployment_names_one(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(mandate("acc_MERCHANTA1", "agent_a", None).model_dump(mode="json")))
    assert len(MandateStore.load([path])) == 1  # no account configured: today's deployments load unchanged
    with pytest.raises(MandateError, match=r"rail: \{account_id: acc_SHARED0001\}"):
        MandateStore.load([path], rail_account_id=ACCOUNT)


def test_naming_no_account_keeps_the_mandate_hash() -> None:
    plain = mandate("acc_MERCHANTA1", "agent_a", None)
    assert b'"rail"' not in plain.canonical_bytes  # left out while unset: existing mandates and signatures hold
    assert plain.mandate_hash == make_mandate({**ROOMY, "merchant_id": "acc_MERCHANTA1", "agent_id": "agent_a",
                                               "mandate_id": "mnd_agent_a"}, drop=NO_PAYOUTS).mandate_hash
    assert mandate("acc_MERCHANTA1", "agent_a").mandate_hash != plain.mandate_hash
