"""The rail worker's payout balance re-check at admission (SPEC §8 step 6, ADR 0028 as built): payouts that passed
the gate ladder together — each judged against the same RazorpayX balance read, before either was admitted, so
each alone fits — are admitted only as far as that balance pays for them all, each with its fee, counted across
every payee of the account. The gate cannot see the other call; only the admission, under the write lock, can.

In-process so that both Decisions are certainly made before either is admitted, and a call is certainly still in
motion when the next is admitted: the real gate (gate_workers.jobs.decide) and the real rail worker runtime (boot,
admit with the Dispatcher's start-with-admission, complete) over a real ledger file, a real Redis and the sandbox
rail over HTTP.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from deploy.redis_server import EmbeddedRedis
from gate_workers.jobs import GateRuntime, decide
from interlock.clock import now_ms
from interlock.config import load_settings
from interlock.fees import DEFAULT_FEE_RATE
from interlock.messages import CallerAction, Decision, Outcome, Proposal, Verdict
from ledger import intents
from ledger.db import open_ledger
from ledger.states import State
from rail_worker.admit import Admission, admit
from rail_worker.execute import Started, complete
from rail_worker.lease import boot
from rail_worker.runtime import RailRuntime
from sandbox.rail import DEFAULT_ACCOUNT_NUMBER
from sandbox.testing import SandboxProcess
from tests.mandates import AGENT, MERCHANT, write_mandate

PAYOUT = "create_payout"
FEE = DEFAULT_FEE_RATE.project_payout()  # Rs 5 + 18% GST: what the rail debits beside each payout
BALANCE = 60_000
_ids = itertools.count(1)


def _fund_account_id(tag: str) -> str:
    return f"fa_{tag}{os.getpid() % 10**5:05d}{next(_ids):08d}"  # fa_ and 14, as RazorpayX's ids are


@dataclass
class Shard:
    """One shard's gate and leased rail worker, in this process, over one ledger, Redis and the sandbox rail."""

    gate: GateRuntime
    rail_worker: RailRuntime
    sandbox: SandboxProcess
    payees: tuple[str, str]

    def judge(self, fund_account_id: str, amount: int) -> Decision:
        """The gate ladder's Decision on a payout call received now (what a gate worker puts on the rail queue)."""
        proposal = Proposal(request_id=f"req-payout-{next(_ids)}", agent_id=AGENT, merchant_id=MERCHANT, tool=PAYOUT,
                            arguments={"fund_account_id": fund_account_id, "amount": amount, "currency": "INR",
                                       "mode": "IMPS", "purpose": "vendor bill"},
                            received_at_ms=now_ms())  # fmt: skip
        return decide(proposal, self.gate)

    def paid(self) -> list[dict[str, Any]]:
        """The payouts the rail holds to this test's payees (the sandbox is shared by the module's tests)."""
        return [e["entity"] for e in self.sandbox.entities("payout")
                if e["entity"]["fund_account_id"] in self.payees]  # fmt: skip

    def state(self, sik: str | None) -> State | None:
        assert sik is not None
        conn = open_ledger(self.rail_worker.ledger_path, readonly=True)
        try:
            intent = intents.get_intent(conn, MERCHANT, sik)
        finally:
            conn.close()
        return None if intent is None else intent.state


@pytest.fixture
def shard(tmp_path: Path, redis_server: EmbeddedRedis, redis_client: redis.Redis,
          rail_sandbox: SandboxProcess) -> Iterator[Shard]:  # fmt: skip
    """A mandate granting create_payout to two payees of one RazorpayX account (a fund account by id, and another
    by its contact), the account's balance BALANCE, and the rail worker holding the lease (boot, as at start)."""
    listed, by_contact = _fund_account_id("L"), _fund_account_id("C")
    contact = f"cont_{os.getpid() % 10**5:05d}{next(_ids):09d}"
    mandate = write_mandate(tmp_path / "mandate.yaml", {
        "scope.grants.create_payout": {
            "reversibility": "irreversible",
            "value": {"min_amount_minor": 100, "max_amount_minor": 1_000_000, "currencies": ["INR"]},
            "payees": {"fund_account_ids": [listed], "contact_ids": [contact]},
        },
        "rail.account_number": DEFAULT_ACCOUNT_NUMBER,
    })  # fmt: skip
    rail_sandbox.add_fund_account(listed)
    rail_sandbox.add_fund_account(by_contact, contact={"id": contact})
    rail_sandbox.set_banking_balance(BALANCE)
    rail_sandbox.clear_faults()
    settings = load_settings(ledger=tmp_path / "ledger.sqlite3", redis_url=redis_server.url, mandate=mandate,
                             rail_url=rail_sandbox.url, rail_key_id=rail_sandbox.key_id,
                             rail_key_secret=rail_sandbox.key_secret)  # fmt: skip
    rail_worker = RailRuntime.build(settings, redis_client)
    assert boot(rail_worker) == []  # the lease taken, nothing stranded
    rail_worker.start_with_admission = True  # as the Dispatcher admits: the attempt starts in the admission's commit
    gate = GateRuntime.from_settings(settings, wait_for_ledger_s=0)
    yield Shard(gate, rail_worker, rail_sandbox, (listed, by_contact))
    rail_sandbox.clear_faults()
    gate.ledger.close()
    rail_worker.ledger.close()


def _passed_the_gate(decision: Decision, amount: int) -> None:
    """Allowed by every gate, judged against the whole balance: nothing of ours was in motion when it was read."""
    assert (decision.verdict, decision.reason_code) == (Verdict.ALLOW, "ALLOWED"), decision.results
    assert decision.terms is not None and decision.terms.amount_minor == amount
    assert decision.rail_basis_minor == BALANCE


def _authorized(admission: Admission) -> Started:
    """The admission authorized the call and started its attempt in the same commit (IN_FLIGHT)."""
    assert admission.outcome is None and admission.execute is not None, admission
    assert isinstance(admission.started, Started), admission
    return admission.started


def _refused_for_the_balance(shard: Shard, admission: Admission, decision: Decision) -> None:
    """Refused at admission for the payout balance: do not repeat (the balance will not pay it), nothing recorded
    but the decision."""
    assert admission.execute is None, (
        f"payout {decision.sik} of {decision.terms and decision.terms.amount_minor} was admitted to be sent "
        f"({admission.execute.state}): the balance cannot pay it beside the payouts in motion")
    outcome = admission.outcome
    assert outcome is not None, admission
    assert (outcome.state, outcome.reason_code, outcome.caller_action, outcome.sik) == (
        "BLOCKED", "G2_EXCEEDS_PAYOUT_BALANCE", CallerAction.DO_NOT_RETRY, decision.sik), outcome  # fmt: skip
    assert shard.state(decision.sik) is None
    conn = open_ledger(shard.rail_worker.ledger_path, readonly=True)
    try:
        recorded = intents.recorded_decision(conn, decision.request_id)
        assert recorded is not None and recorded.reason_code == "G2_EXCEEDS_PAYOUT_BALANCE"
    finally:
        conn.close()


def _applied(shard: Shard, started: Started) -> Outcome:
    outcome = complete(shard.rail_worker, started)
    assert outcome is not None and (outcome.state, outcome.caller_action) == ("APPLIED", "DONE"), outcome
    return outcome


def test_two_payouts_past_the_gate_together_that_the_balance_cannot_both_pay_are_one_payout(shard: Shard) -> None:
    """Two payees, 30,000 each: each fits the balance of 60,000 with its fee, the two together do not. The gate
    allows both (neither sees the other); the admission admits the first and refuses the second."""
    listed, by_contact = shard.payees
    first, second = shard.judge(listed, 30_000), shard.judge(by_contact, 30_000)
    _passed_the_gate(first, 30_000)
    _passed_the_gate(second, 30_000)
    assert first.sik != second.sik  # two payouts, not a repeat of one

    started = _authorized(admit(shard.rail_worker, first))
    _refused_for_the_balance(shard, admit(shard.rail_worker, second), second)
    applied = _applied(shard, started)

    [paid] = shard.paid()
    assert (paid["id"], paid["fund_account_id"], paid["amount"]) == (applied.rail_entity_id, listed, 30_000)
    assert shard.state(first.sik) is State.APPLIED
    # Redelivered, the refused Decision is answered with the same refusal, and still nothing is sent.
    again = admit(shard.rail_worker, second)
    assert again.outcome is not None and again.execute is None
    assert (again.outcome.reason_code, again.outcome.caller_action) == (
        "G2_EXCEEDS_PAYOUT_BALANCE", CallerAction.DO_NOT_RETRY)  # fmt: skip
    assert len(shard.paid()) == 1


@pytest.mark.parametrize("in_motion", [State.IN_FLIGHT, State.UNKNOWN])
def test_a_payout_still_in_motion_counts_with_its_fee_against_one_admitted_after_it(
    shard: Shard, in_motion: State
) -> None:
    """A payout whose request is out (IN_FLIGHT) or whose answer was lost (UNKNOWN: it may have been paid) is money
    the balance may already have paid, and its fee beside it. After one of 30,000, 60,000 pays exactly one more of
    60,000 - (30,000 + FEE) - FEE: that one is admitted and paid, one paisa more is refused for the balance — not as a
    stale read to be repeated, which a re-check that left out either fee would answer."""
    listed, by_contact = shard.payees
    fits = BALANCE - (30_000 + FEE) - FEE  # 28,820 with the Rs 5.90 fee
    first, over, exact = shard.judge(listed, 30_000), shard.judge(by_contact, fits + 1), shard.judge(by_contact, fits)
    for decision, amount in ((first, 30_000), (over, fits + 1), (exact, fits)):
        _passed_the_gate(decision, amount)

    started = _authorized(admit(shard.rail_worker, first))
    if in_motion is State.UNKNOWN:
        shard.sandbox.set_faults([{"name": "ambiguous_504", "rate": 1.0}])  # applied on the rail, the answer lost
        outcome = complete(shard.rail_worker, started)
        assert outcome is not None and outcome.state == "UNKNOWN", outcome
        shard.sandbox.clear_faults()
    assert shard.state(first.sik) is in_motion

    _refused_for_the_balance(shard, admit(shard.rail_worker, over), over)
    last = _authorized(admit(shard.rail_worker, exact))
    if in_motion is State.IN_FLIGHT:
        _applied(shard, started)
    _applied(shard, last)

    # The rail paid both from the one balance, to the paisa: nothing was left for the one refused.
    paid = sorted((p["fund_account_id"], p["amount"]) for p in shard.paid())
    assert paid == sorted([(listed, 30_000), (by_contact, fits)])
    assert shard.sandbox.journal()["banking_balances"][DEFAULT_ACCOUNT_NUMBER] == 0
    assert (shard.state(first.sik), shard.state(exact.sik), shard.state(over.sik)) == (
        in_motion if in_motion is State.UNKNOWN else State.APPLIED, State.APPLIED, None)
