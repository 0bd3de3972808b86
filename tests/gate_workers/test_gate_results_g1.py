"""G1's whole result: the mandate in force to the exact millisecond, the caller, and — with task binding — a
task that cannot be trusted, a missing task the mandate requires, a tool the task does not grant. The mandate's own
refusal is reported before anything about the task."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gate_workers.context import ResolvedAction
from gate_workers.gates import g1_scope
from interlock.mandate import Mandate
from interlock.messages import Verdict
from interlock.task import TASK_BAD_SIGNATURE, Task, TaskProblem, VerifiedTask, new_task, public_key_b64
from interlock.verdicts import GateResult
from tests.gate_workers.factories import NOW, context, refund_action
from tests.mandates import AGENT, MERCHANT, make_mandate

A, B = Verdict.ALLOW, Verdict.BLOCK
ISSUED, EXPIRES = NOW - 1_000, NOW + 1_000
IN_SCOPE = GateResult(A, "G1_IN_SCOPE", {"mandate_id": "mnd_demo_support"})
SIGNER = public_key_b64(Ed25519PrivateKey.generate())


def bound(binding: str) -> Mandate:
    return make_mandate({"task_binding": binding, "task_signers": {"ticketing": SIGNER}})


def with_task(action: ResolvedAction, tool: str) -> ResolvedAction:
    task = Task.model_validate(new_task("ticket-7", NOW + 3_600_000, tool, merchant_id=MERCHANT, agent_ids=[AGENT]))
    return replace(action, task=VerifiedTask(task=task, digest="d" * 64, signer="ticketing"))


PROBLEM = TaskProblem(TASK_BAD_SIGNATURE, {"signer": "ticketing", "task_digest": "e" * 64})


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (ISSUED - 1, GateResult(B, "G1_MANDATE_NOT_YET_VALID", {"issued_at": ISSUED, "now_ms": ISSUED - 1})),
        (ISSUED, IN_SCOPE),
        (EXPIRES - 1, IN_SCOPE),
        (EXPIRES, GateResult(B, "G1_MANDATE_EXPIRED", {"expires_at": EXPIRES, "now_ms": EXPIRES})),
    ],
)
def test_the_mandate_is_in_force_from_issued_at_up_to_but_not_at_expires_at(
    ledger: sqlite3.Connection, now: int, expected: GateResult
) -> None:
    mandate = make_mandate({"issued_at": ISSUED, "expires_at": EXPIRES})
    assert g1_scope.check(refund_action(), context(ledger, mandate, now=now)) == expected


@pytest.mark.parametrize(
    ("action_kw", "expected"),
    [
        ({"agent_id": "agent_other"},
         GateResult(B, "G1_AGENT_MISMATCH", {"agent_id": "agent_other", "mandate_agent_id": "agent_demo"})),
        ({"merchant_id": "acc_OTHER"},
         GateResult(B, "G1_MERCHANT_MISMATCH", {"merchant_id": "acc_OTHER", "mandate_merchant_id": "acc_DEMO000001"})),
    ],
)  # fmt: skip
def test_a_caller_other_than_the_mandates_agent_and_merchant_is_blocked(
    ledger: sqlite3.Connection, action_kw: dict[str, Any], expected: GateResult
) -> None:
    assert g1_scope.check(refund_action(**action_kw), context(ledger)) == expected


def test_a_tool_the_mandate_does_not_grant_is_blocked_naming_the_granted_ones(ledger: sqlite3.Connection) -> None:
    without = make_mandate(drop=("rail", "scope.grants.create_payout", "idempotency.create_payout"))
    result = g1_scope.check(refund_action(tool="create_payout"), context(ledger, without))
    granted = ["create_instant_settlement", "create_refund", "fetch_payment", "fetch_refund", "interlock_status"]
    assert result == GateResult(B, "G1_TOOL_NOT_GRANTED", {"tool": "create_payout", "granted": granted})


def test_without_a_mandate_the_agent_is_named(ledger: sqlite3.Connection) -> None:
    result = g1_scope.check(refund_action(), replace(context(ledger), mandate=None))
    assert result == GateResult(B, "G1_NO_MANDATE", {"agent_id": "agent_demo"})


def test_required_binding_blocks_a_call_with_no_task(ledger: sqlite3.Connection) -> None:
    result = g1_scope.check(refund_action(), context(ledger, bound("required")))
    assert result == GateResult(B, "G1_TASK_REQUIRED", {"tool": "create_refund", "task_binding": "required"})


def test_a_mandate_refusal_is_reported_before_a_missing_required_task(ledger: sqlite3.Connection) -> None:
    result = g1_scope.check(refund_action(agent_id="agent_other"), context(ledger, bound("required")))
    assert result == GateResult(B, "G1_AGENT_MISMATCH", {"agent_id": "agent_other", "mandate_agent_id": "agent_demo"})


def test_a_mandate_refusal_is_reported_before_an_untrusted_task(ledger: sqlite3.Connection) -> None:
    action = replace(refund_action(merchant_id="acc_OTHER"), task_problem=PROBLEM)
    result = g1_scope.check(action, context(ledger, bound("optional")))
    assert result == GateResult(B, "G1_MERCHANT_MISMATCH", {"merchant_id": "acc_OTHER",
                                                            "mandate_merchant_id": "acc_DEMO000001"})  # fmt: skip


@pytest.mark.parametrize("binding", ["optional", "required"])
def test_an_untrusted_task_blocks_with_its_problem(ledger: sqlite3.Connection, binding: str) -> None:
    result = g1_scope.check(replace(refund_action(), task_problem=PROBLEM), context(ledger, bound(binding)))
    assert result == GateResult(B, "G1_TASK_BAD_SIGNATURE", {"signer": "ticketing", "task_digest": "e" * 64})


def test_optional_binding_allows_a_call_with_no_task(ledger: sqlite3.Connection) -> None:
    assert g1_scope.check(refund_action(), context(ledger, bound("optional"))) == IN_SCOPE


def test_binding_off_ignores_even_an_untrusted_task(ledger: sqlite3.Connection) -> None:
    action = replace(refund_action(), task_problem=PROBLEM)
    assert g1_scope.check(action, context(ledger, make_mandate({"task_binding": "off"}))) == IN_SCOPE


def test_a_task_that_grants_the_tool_is_in_scope(ledger: sqlite3.Connection) -> None:
    action = with_task(refund_action(), "create_refund")
    assert g1_scope.check(action, context(ledger, bound("required"))) == IN_SCOPE


def test_a_task_that_does_not_grant_the_tool_blocks_naming_what_it_grants(ledger: sqlite3.Connection) -> None:
    action = with_task(refund_action(), "create_instant_settlement")
    result = g1_scope.check(action, context(ledger, bound("optional")))
    assert result == GateResult(B, "G1_TOOL_NOT_IN_TASK", {"tool": "create_refund", "task_id": "ticket-7",
                                                           "granted": ["create_instant_settlement"]})  # fmt: skip
