"""G2 against the real sandbox rail: the referent is resolved on the rail, never taken from the model."""

from __future__ import annotations

import itertools
import sqlite3

from gate_workers.context import GateContext
from gate_workers.gates import g2_value
from gate_workers.resolve import resolve
from interlock.messages import Proposal, Verdict
from interlock.sik import idempotency_key_for, receipt_for, stamp_notes
from interlock.tools import current_pins
from rails.razorpay import RazorpayClient
from sandbox.testing import SandboxProcess
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

NOW = 1_800_000_000_000
_ids = itertools.count(1)


def client(rail: SandboxProcess) -> RazorpayClient:
    return RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000)


def proposal(tool: str = "create_refund", **arguments: object) -> Proposal:
    return Proposal(request_id=f"r{next(_ids)}", agent_id=AGENT, merchant_id=MERCHANT, tool=tool,
                    arguments=dict(arguments), received_at_ms=NOW)  # fmt: skip


def judge(rail: SandboxProcess, ledger: sqlite3.Connection, p: Proposal) -> tuple[Verdict, str, object]:
    mandate = make_mandate({"approval.hold_above_minor": 1_000_000})
    action = resolve(p, client(rail), ledger, mandate, NOW)
    ctx = GateContext(mandate=mandate, now_ms=NOW, ledger=ledger, tool_hashes=current_pins())
    result = g2_value.check(action, ctx)
    return result.verdict, result.reason_code, action


def new_payment(rail: SandboxProcess, amount: int, **extra: object) -> str:
    pid = f"pay_G2x{next(_ids)}"
    rail.add_payment(pid, amount, **extra)
    return pid


def test_injected_over_refund_is_blocked(rail_sandbox: SandboxProcess, ledger: sqlite3.Connection) -> None:
    pid = new_payment(rail_sandbox, 189900)
    verdict, reason, _ = judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=4800000))
    assert (verdict, reason) == (Verdict.BLOCK, "G2_EXCEEDS_REFUNDABLE")


def test_subject_is_the_rail_id_and_full_refund_resolves_to_a_number(
    rail_sandbox: SandboxProcess, ledger: sqlite3.Connection
) -> None:
    pid = new_payment(rail_sandbox, 189900)
    verdict, _, action = judge(rail_sandbox, ledger, proposal(payment_id=pid))
    assert verdict is Verdict.ALLOW
    assert action.subject == pid and action.amount_minor == 189900 and action.currency == "INR"  # type: ignore[attr-defined]


def test_a_second_partial_refund_sees_the_reduced_ceiling(
    rail_sandbox: SandboxProcess, ledger: sqlite3.Connection
) -> None:
    pid = new_payment(rail_sandbox, 100000)
    rail = client(rail_sandbox)
    rail.create_refund(pid, 60000, notes=stamp_notes("X" * 32), receipt=receipt_for("X" * 32),
                       idempotency_key=idempotency_key_for("X" * 32))  # fmt: skip
    assert judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=40000))[0] is Verdict.ALLOW
    verdict, reason, _ = judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=40001))
    assert (verdict, reason) == (Verdict.BLOCK, "G2_EXCEEDS_REFUNDABLE")


def test_intents_in_flight_reduce_the_ceiling(rail_sandbox: SandboxProcess, ledger: sqlite3.Connection) -> None:
    pid = new_payment(rail_sandbox, 100000)
    put_intent(ledger, "I" * 32, "IN_FLIGHT", amount=70000, subject=pid)
    assert judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=30000))[0] is Verdict.ALLOW
    assert judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=30001))[1] == "G2_EXCEEDS_REFUNDABLE"


def test_currency_mismatch(rail_sandbox: SandboxProcess, ledger: sqlite3.Connection) -> None:
    pid = new_payment(rail_sandbox, 10000, currency="USD")
    assert judge(rail_sandbox, ledger, proposal(payment_id=pid, amount=5000))[1] == "G2_CURRENCY_MISMATCH"


def test_unknown_payment_is_not_found(rail_sandbox: SandboxProcess, ledger: sqlite3.Connection) -> None:
    verdict, reason, action = judge(rail_sandbox, ledger, proposal(payment_id="pay_DOESNOTEXIST", amount=100))
    assert (verdict, reason) == (Verdict.BLOCK, "G2_PAYMENT_NOT_FOUND")
    assert action.sik is None  # type: ignore[attr-defined]


def test_settle_full_balance_resolves_to_the_current_balance(
    rail_sandbox: SandboxProcess, ledger: sqlite3.Connection
) -> None:
    rail_sandbox.set_balance(750000)
    verdict, _, action = judge(rail_sandbox, ledger, proposal("create_instant_settlement", settle_full_balance=True))
    assert verdict is Verdict.ALLOW
    assert action.amount_minor == 750000 and action.subject == "balance"  # type: ignore[attr-defined]
    assert action.window == NOW // 86_400_000  # type: ignore[attr-defined]
    assert judge(rail_sandbox, ledger, proposal("create_instant_settlement", amount=750001))[1] == "G2_EXCEEDS_BALANCE"


def test_a_settlement_retry_across_a_window_boundary_is_the_same_operation(
    rail_sandbox: SandboxProcess, ledger: sqlite3.Connection
) -> None:
    rail_sandbox.set_balance(900000)
    day = 86_400_000
    first = resolve(proposal("create_instant_settlement", amount=30000), client(rail_sandbox), ledger,
                    make_mandate(), NOW - 1)  # fmt: skip
    assert first.sik is not None and first.window == (NOW - 1) // day
    put_intent(ledger, first.sik, "UNKNOWN", amount=30000, subject="balance", tool="create_instant_settlement")
    after = resolve(proposal("create_instant_settlement", amount=30000), client(rail_sandbox), ledger,
                    make_mandate(), ((NOW - 1) // day + 1) * day)  # the first millisecond of the next window
    assert after.sik == first.sik, "an unsettled settlement must not be made again because the clock moved"
