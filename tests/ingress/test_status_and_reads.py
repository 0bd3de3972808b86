"""interlock_status answers from the ledger file; fetch_payment / fetch_refund pass G1 and go to a real
sandbox rail process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import intents, lifecycle
from ledger.db import open_ledger, transaction
from ledger.states import Event
from sandbox.testing import SandboxProcess, start_sandbox
from tests.ingress.helpers import DEMO_MERCHANT, error_of, stdio_client_for
from tests.ingress.test_tool_calls import LIMITED_MANDATE
from tests.ledger.helpers import put_intent

pytestmark = pytest.mark.anyio

SIK_APPLIED = "APPLIEDAAAAAAAAAAAAAAAAAAAAAAAAA"
SIK_HELD = "HELDAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
SIK_OTHER_MERCHANT = "THERMERCHANTAAAAAAAAAAAAAAAAAAAA"
SIK_FAILED = "FAILEDATBANKAAAAAAAAAAAAAAAAAAAA"


@pytest.fixture
def ledger_file(env: dict[str, str]) -> Path:
    path = Path(env["INTERLOCK_LEDGER"])
    conn = open_ledger(path)
    try:
        put_intent(conn, SIK_APPLIED, "IN_FLIGHT", amount=189900, subject="pay_29QQoUBi66xm2f")
        with transaction(conn):
            intents.transition(conn, DEMO_MERCHANT, SIK_APPLIED, Event.RAIL_APPLIED, now=2,
                               set_fields={"rail_entity_id": "rfnd_FP8QHiV938haTz"})  # fmt: skip
            intents.bind_operation_ref(conn, DEMO_MERCHANT, "order-7781-refund", SIK_APPLIED, now=2)
        put_intent(conn, SIK_HELD, "HELD", amount=400000)
        put_intent(conn, SIK_OTHER_MERCHANT, "APPLIED", amount=100, merchant_id="acc_OTHER00001")
        put_intent(conn, SIK_FAILED, "APPLIED", amount=5000)
        # The rail accepted the refund; the bank failed it afterwards.
        for status, ref in (("pending", None), ("failed", "evt_FAILED0001")):
            with transaction(conn):
                lifecycle.observe(conn, merchant_id=DEMO_MERCHANT, sik=SIK_FAILED, tool="create_refund",
                                  entity_id="rfnd_FAILED00001", status=status,
                                  entity={"id": "rfnd_FAILED00001", "status": status, "amount": 5000},
                                  source=lifecycle.WEBHOOK, ref=ref, now=7, next_poll_at=None,
                                  actor="test")  # fmt: skip
    finally:
        conn.close()
    return path


async def test_status_by_sik_and_by_operation_ref_answers_the_result_contract(env, errlog, ledger_file) -> None:
    expected = {
        "state": "APPLIED",
        "sik": SIK_APPLIED,
        "intent": {"merchant_id": DEMO_MERCHANT, "tool": "create_refund", "subject": "pay_29QQoUBi66xm2f",
                   "amount_minor": 189900, "currency": "INR"},
        "rail_entity_id": "rfnd_FP8QHiV938haTz",
        "reason_code": None,
        "caller_action": "DONE",
        "replayed": True,
    }  # fmt: skip
    async with stdio_client_for(env, errlog) as client:
        by_sik = await client.call_tool("interlock_status", {"sik": SIK_APPLIED})
        by_ref = await client.call_tool("interlock_status", {"operation_ref": "order-7781-refund"})
        held = await client.call_tool("interlock_status", {"sik": SIK_HELD})
    assert not by_sik.is_error and by_sik.structured_content == expected
    assert not by_ref.is_error and by_ref.structured_content == expected
    assert (held.structured_content["state"], held.structured_content["caller_action"]) == ("HELD", "WAIT_FOR_APPROVAL")


async def test_status_of_a_refund_the_bank_failed_is_applied_and_sends_the_caller_to_a_person(
        env, errlog, ledger_file) -> None:  # fmt: skip
    async with stdio_client_for(env, errlog) as client:
        failed = await client.call_tool("interlock_status", {"sik": SIK_FAILED})
        accepted = await client.call_tool("interlock_status", {"sik": SIK_APPLIED})
    assert not failed.is_error
    body = failed.structured_content
    assert body["state"] == "APPLIED"  # the money machine's word stands: the rail accepted the call
    assert body["rail_status"] == {"status": "failed", "final": True, "attention": "REFUND_FAILED",
                                   "amounts": {"amount": 5000}, "source": "webhook", "updated_at": 7}  # fmt: skip
    assert body["caller_action"] == "ESCALATE_TO_OPERATOR"  # a new refund is a new decision, never a retry
    assert "rail_status" not in accepted.structured_content  # not followed yet: nothing is claimed


async def test_status_of_an_unknown_or_another_merchants_operation_is_not_found(env, errlog, ledger_file) -> None:
    async with stdio_client_for(env, errlog) as client:
        other = await client.call_tool("interlock_status", {"sik": SIK_OTHER_MERCHANT})
        unknown_ref = await client.call_tool("interlock_status", {"operation_ref": "never-used"})
    for result in (other, unknown_ref):
        assert not result.is_error
        assert result.structured_content["state"] == "NOT_FOUND"
        assert result.structured_content["intent"] is None
        assert result.structured_content["caller_action"] == "RETRY_SAME_CALL"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    with start_sandbox(tmp_path_factory.mktemp("sandbox")) as rail:
        rail.add_payment("pay_INGRESS00001", 250000)
        yield rail


async def test_fetch_payment_returns_the_rails_entity(env, errlog, sandbox: SandboxProcess) -> None:
    async with stdio_client_for({**env, **sandbox.rail_env()}, errlog) as client:
        found = await client.call_tool("fetch_payment", {"payment_id": "pay_INGRESS00001"})
        missing = await client.call_tool("fetch_refund", {"refund_id": "rfnd_NOPE0000000001"})
    assert not found.is_error
    assert found.structured_content["id"] == "pay_INGRESS00001"
    assert found.structured_content["amount"] == 250000
    body = error_of(missing)
    assert (body["error"]["code"], body["caller_action"]) == ("NOT_FOUND", "DO_NOT_RETRY")


async def test_a_read_outside_the_mandate_is_refused_by_g1(env, errlog, sandbox, tmp_path: Path) -> None:
    mandate = tmp_path / "limited.yaml"
    mandate.write_text(LIMITED_MANDATE)
    env = {**env, **sandbox.rail_env(), "INTERLOCK_MANDATE": str(mandate), "INTERLOCK_AGENT_ID": "agent_limited"}
    async with stdio_client_for(env, errlog) as client:
        refused = await client.call_tool("fetch_refund", {"refund_id": "rfnd_ANY0000000001"})
        allowed = await client.call_tool("fetch_payment", {"payment_id": "pay_INGRESS00001"})
    assert error_of(refused)["error"]["reason_code"] == "G1_TOOL_NOT_GRANTED"
    assert not allowed.is_error
