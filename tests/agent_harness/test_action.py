"""The harness kit on its own (pure unit tests; tests/agents drives it inside each framework against the real
stack): what it puts in `_meta`, and how it follows each `caller_action`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent_harness import Escalation, Harness, NoBusinessAction, RetryPolicy, action_for, structured
from agent_harness.mcp_session import HarnessSession
from agent_harness.pydantic_ai import process_tool_call
from interlock.clock import now_ms
from interlock.task import public_key_b64, verify_task

KEY = Ed25519PrivateKey.generate()
QUICK = RetryPolicy(first_delay_s=0.001, max_delay_s=0.002, give_up_after_s=5)


def harness(**options: Any) -> Harness:
    return Harness("acc_DEMO000001", ["agent_demo"], KEY, "helpdesk", policy=QUICK, **options)


def answer(state: str, caller_action: str, *, replayed: bool = False) -> dict[str, Any]:
    return {"state": state, "sik": "A" * 32, "caller_action": caller_action, "replayed": replayed}


class Wire:
    """A stand-in for one framework's call: records the `_meta` of each send and replies from a script."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.metas: list[Mapping[str, Any]] = []

    async def send(self, meta: dict[str, Any]) -> dict[str, Any]:
        self.metas.append(meta)
        return self.answers.pop(0)


def test_the_action_meta_carries_its_operation_ref_and_a_task_interlock_verifies() -> None:
    action = harness().action("ticket-4411", subjects=["pay_X"], max_amount_minor=189_900)
    meta = action.meta()
    assert meta["interlock/operation_ref"] == "ticket-4411"
    verified = verify_task(meta["interlock/task"], meta["interlock/task_sig"], {"helpdesk": public_key_b64(KEY)},
                           now_ms())  # fmt: skip
    assert not hasattr(verified, "reason_code"), verified
    assert verified.audience_problem("acc_DEMO000001", "agent_demo") is None  # type: ignore[union-attr]
    assert verified.task.grants["create_refund"].subjects == ["pay_X"]  # type: ignore[union-attr]


def test_an_operation_ref_interlock_would_refuse_is_refused_before_any_call() -> None:
    with pytest.raises(ValueError, match="operation_ref"):
        harness().action("ticket 4411 / refund")


def test_retry_same_call_repeats_the_same_call_with_the_same_meta_until_the_outcome_is_known() -> None:
    wire = Wire(answer("UNKNOWN", "RETRY_SAME_CALL"), answer("UNKNOWN", "RETRY_SAME_CALL", replayed=True),
                answer("APPLIED", "DONE", replayed=True))  # fmt: skip
    action = harness().action("ticket-1")
    result = asyncio.run(action.call("create_refund", {"payment_id": "pay_X", "amount": 100}, wire.send, structured))
    assert result["state"] == "APPLIED"
    assert len(wire.metas) == 3 and all(m == wire.metas[0] for m in wire.metas)
    assert [c.result["state"] for c in action.sent if c.result] == ["UNKNOWN", "UNKNOWN", "APPLIED"]


def test_retry_same_call_is_handed_to_the_model_once_the_policy_gives_up() -> None:
    wire = Wire(*[answer("IN_PROGRESS", "RETRY_SAME_CALL")] * 50)
    action = Harness("acc_DEMO000001", ["agent_demo"], policy=RetryPolicy(0.01, 0.01, give_up_after_s=0.05)).action(
        "ticket-2")
    result = asyncio.run(action.call("create_refund", {}, wire.send, structured))
    assert result["caller_action"] == "RETRY_SAME_CALL" and 2 <= len(wire.metas) < 50
    assert "interlock/task" not in wire.metas[0]  # no key: the operation_ref alone


@pytest.mark.parametrize("state, caller_action", [("HELD", "WAIT_FOR_APPROVAL"),
                                                  ("QUARANTINED", "ESCALATE_TO_OPERATOR")])  # fmt: skip
def test_a_call_a_person_must_decide_is_surfaced_to_one_and_not_repeated(state: str, caller_action: str) -> None:
    escalations: list[Escalation] = []
    wire = Wire(answer(state, caller_action))
    action = harness(on_escalate=escalations.append).action("ticket-3")
    asyncio.run(action.call("create_refund", {"payment_id": "pay_X", "amount": 400_000}, wire.send, structured))
    assert len(wire.metas) == 1
    assert [(e.operation_ref, e.caller_action, e.result["state"], dict(e.arguments)) for e in escalations] == [
        ("ticket-3", caller_action, state, {"payment_id": "pay_X", "amount": 400_000})]  # fmt: skip


def test_do_not_retry_goes_back_to_the_model_as_it_is() -> None:
    escalations: list[Escalation] = []
    wire = Wire(answer("BLOCKED", "DO_NOT_RETRY"))
    action = harness(on_escalate=escalations.append).action("ticket-4")
    result = asyncio.run(action.call("create_refund", {}, wire.send, structured))
    assert (result["state"], len(wire.metas), escalations) == ("BLOCKED", 1, [])


def test_a_money_tool_outside_a_business_action_is_not_sent_and_a_read_needs_none() -> None:
    with pytest.raises(NoBusinessAction):
        action_for("create_refund")
    assert action_for("fetch_payment") is None
    with harness().action("ticket-5") as action:
        assert action_for("create_payout") is action
        assert action_for("interlock_status") is None
    with pytest.raises(NoBusinessAction):
        action_for("create_instant_settlement")


class Session:
    """The MCP SDK ClientSession's call_tool, as langchain-mcp-adapters calls it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.answers = [answer("UNKNOWN", "RETRY_SAME_CALL"), answer("APPLIED", "DONE", replayed=True)]

    async def call_tool(self, name: str, arguments: Any = None, progress_callback: Any = None,
                        meta: Any = None) -> Any:  # fmt: skip
        self.calls.append((name, arguments, meta))
        return {"id": "pay_X"} if name == "fetch_payment" else self.answers.pop(0)


def test_the_session_wrapper_sends_money_calls_with_the_action_meta_and_reads_as_they_are() -> None:
    session = Session()
    wrapped = HarnessSession(session)

    async def agent_turns() -> None:
        with harness().action("ticket-6"):
            await wrapped.call_tool("fetch_payment", {"payment_id": "pay_X"}, progress_callback=None)
            await wrapped.call_tool("create_refund", {"payment_id": "pay_X", "amount": 100}, progress_callback=None)

    asyncio.run(agent_turns())
    assert session.calls[0] == ("fetch_payment", {"payment_id": "pay_X"}, None)
    refunds = session.calls[1:]
    assert len(refunds) == 2 and refunds[0] == refunds[1]
    assert refunds[0][2]["interlock/operation_ref"] == "ticket-6" and "interlock/task_sig" in refunds[0][2]


def test_the_pydantic_ai_hook_passes_the_action_meta_as_the_toolsets_metadata() -> None:
    sent: list[Any] = []

    async def call_tool(name: str, args: dict[str, Any], *, metadata: Any = None) -> Any:
        sent.append(metadata)
        return answer("APPLIED", "DONE")

    async def agent_turn() -> Any:
        with harness().action("ticket-7"):
            return await process_tool_call(None, call_tool, "create_refund", {"payment_id": "pay_X", "amount": 1})

    assert asyncio.run(agent_turn())["state"] == "APPLIED"
    assert sent[0]["interlock/operation_ref"] == "ticket-7"


def test_an_operation_ref_in_meta_from_anywhere_but_the_action_is_overwritten() -> None:
    session = Session()
    forged = {"interlock/operation_ref": "model-picked", "interlock/task": {"task_id": "forged"}, "trace": "kept"}

    async def agent_turn() -> None:
        with harness().action("ticket-8"):
            await HarnessSession(session).call_tool("create_refund", {"payment_id": "pay_X", "amount": 1},
                                                    meta=forged)  # fmt: skip

    asyncio.run(agent_turn())
    meta = session.calls[0][2]
    assert (meta["interlock/operation_ref"], meta["interlock/task"]["task_id"], meta["trace"]) == (
        "ticket-8", "ticket-8", "kept")  # fmt: skip
