"""A payout to a payee on no list, held for a person (ADR 0034), through the real engine and the sandbox rail:
nothing is sent while it waits; the approver sees the fund account as the rail reports it; approving pays this call,
and — only by the approver's explicit choice — adds the payee to the payees of that mandate version for later calls,
audited PAYEE_ALLOWED. A replaced mandate drops the amendment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from interlock.cli import cli
from interlock.errors import OperatorRefused
from ops import holds
from tests.engine import test_payouts
from tests.engine.conftest import Engine
from tests.engine.test_payouts import _fund_account_id, paid_to, payout, rail_payouts
from tests.ops.conftest import APPROVER, APPROVER_TOKEN, ops_context_for

HOLD_UNLISTED = {"scope.grants.create_payout.payees.unlisted": "hold"}
payout_engine = test_payouts.payout_engine  # the fixture: a mandate granting create_payout to named payees


def held_payout(engine: Engine, fund_account_id: str, amount: int, **extra: Any) -> str:
    held = engine.outcome(engine.propose(payout(fund_account_id, amount, **extra), tool="create_payout"))
    assert (held.state, held.reason_code, held.caller_action) == ("HELD", "G2_PAYEE_UNLISTED_HELD",
                                                                  "WAIT_FOR_APPROVAL"), held  # fmt: skip
    assert held.sik is not None and rail_payouts(engine, held.sik) == []  # nothing is sent while it waits
    return held.sik


def approve(engine: Engine, monkeypatch: pytest.MonkeyPatch, sik: str, **kwargs: Any) -> holds.Released:
    ops = ops_context_for(engine, monkeypatch)
    approver = ops.approvers().authenticate(APPROVER_TOKEN)
    intent = engine.intent(sik)
    assert approver is not None and intent is not None
    return holds.approve(ops, sik, reason="vendor checked by phone", approver=approver,
                         terms_digest=holds.terms_digest(intent), **kwargs)  # fmt: skip


def shown(engine: Engine, monkeypatch: pytest.MonkeyPatch, sik: str) -> dict[str, Any]:
    ops = ops_context_for(engine, monkeypatch)
    found = holds.payees_shown(ops, holds.list_holds(ops))
    return found[sik]


def payee_allowed_records(engine: Engine) -> list[dict[str, Any]]:
    conn = engine.ledger()
    try:
        return [json.loads(r[0]) for r in conn.execute(
            "SELECT payload_json FROM audit_log WHERE kind = 'PAYEE_ALLOWED' ORDER BY seq")]  # fmt: skip
    finally:
        conn.close()


def test_approving_with_the_allow_list_choice_pays_and_lets_later_calls_pass_without_a_hold(
    payout_engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, payees = payout_engine(**HOLD_UNLISTED)
    stranger = payees["stranger"]
    sik = held_payout(engine, stranger, 48_000)
    seen = shown(engine, monkeypatch, sik)
    payee = seen["payee"]
    assert (payee["fund_account_id"], payee["account_type"], payee["active"]) == (stranger, "bank_account", True)
    assert payee["name"].startswith("Sandbox Payee ") and payee["ifsc"] == "HDFC0000053"
    assert payee["account_number"][-4:].isdigit() and set(payee["account_number"][:-4]) == {"x"}
    assert payee["contact_id"].startswith("cont_") and "G2_PAYEE_UNLISTED_HELD" == seen["reason_code"]
    # A digest other than the payee the rail reports now adds nothing and releases nothing.
    with pytest.raises(OperatorRefused, match="is not the fund account the rail reports now"):
        approve(engine, monkeypatch, sik, allow_payee="0" * 16)
    assert engine.intent(sik).state.value == "HELD"  # type: ignore[union-attr]
    released = approve(engine, monkeypatch, sik, allow_payee=seen["payee_digest"])
    assert released.payee_allowed_seq is not None
    engine.settle(sik, {"APPLIED"})
    [record] = payee_allowed_records(engine)
    intent = engine.intent(sik)
    assert intent is not None
    assert (record["approver"], record["fund_account_id"], record["contact_id"], record["mandate_hash"],
            record["agent_id"], record["sik"], record["payee_digest"]) == (
        APPROVER, stranger, payee["contact_id"], intent.mandate_hash, intent.agent_id, sik, seen["payee_digest"])
    assert record["credential"].startswith("approver-token:") and record["payee"] == payee
    # A later call of the agent to the same payee passes G2 without a person.
    later = engine.outcome(engine.propose(payout(stranger, 21_000), tool="create_payout"))
    assert (later.state, later.replayed) == ("APPLIED", False), later
    assert len(paid_to(engine, payees)) == 2


def test_approving_without_the_choice_pays_this_call_only_and_an_inactive_payee_is_still_refused(
    payout_engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine, payees = payout_engine(**HOLD_UNLISTED)
    first = held_payout(engine, payees["stranger"], 48_000)
    released = approve(engine, monkeypatch, first)
    assert released.payee_allowed_seq is None
    engine.settle(first, {"APPLIED"})
    assert payee_allowed_records(engine) == []
    held_payout(engine, payees["stranger"], 21_000)  # the next call waits for a person again
    inactive = engine.outcome(engine.propose(payout(payees["inactive"], 5_000), tool="create_payout"))
    assert (inactive.state, inactive.reason_code) == ("BLOCKED", "G2_PAYEE_INACTIVE")
    assert len(paid_to(engine, payees)) == 1


def test_the_default_still_refuses_an_unlisted_payee_and_holds_nothing(payout_engine) -> None:
    engine, payees = payout_engine()
    stranger = engine.outcome(engine.propose(payout(payees["stranger"]), tool="create_payout"))
    assert (stranger.state, stranger.reason_code) == ("BLOCKED", "G2_PAYEE_NOT_ALLOWED")
    assert paid_to(engine, payees) == []


def test_a_replaced_mandate_drops_the_payee_an_approver_added(payout_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, payees = payout_engine(**HOLD_UNLISTED)
    stranger = payees["stranger"]
    sik = held_payout(engine, stranger, 48_000)
    approve(engine, monkeypatch, sik, allow_payee=shown(engine, monkeypatch, sik)["payee_digest"])
    engine.settle(sik, {"APPLIED"})
    # A person signs a new mandate (a smaller maximum) that does not list the payee: it is unlisted again.
    path = Path(engine.stack.env["INTERLOCK_MANDATE"])
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["scope"]["grants"]["create_payout"]["value"]["max_amount_minor"] = 400_000
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for name in ("rail", *[n for n in engine.stack.actors if n.startswith("gate")]):
        engine.stack.restart(name)
    held_payout(engine, stranger, 21_000)
    assert len(paid_to(engine, payees)) == 1


def test_the_cli_shows_the_payee_and_adds_it_only_when_told(payout_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, payees = payout_engine(**HOLD_UNLISTED)
    payees["vpa_stranger"] = _fund_account_id("V")
    engine.rail.add_fund_account(payees["vpa_stranger"], account_type="vpa")  # a UPI id of a contact on no list
    sik = held_payout(engine, payees["vpa_stranger"], 30_000, mode="UPI")
    ops_context_for(engine, monkeypatch, INTERLOCK_APPROVER_TOKEN=APPROVER_TOKEN)  # the stack's configuration
    listed = CliRunner().invoke(cli, ["holds", "list"])
    assert listed.exit_code == 0, listed.output
    line = listed.output.split(sik, 1)[1].split("\n", 2)[1]
    digest = line.split("payee_digest=", 1)[1].split()[0]
    assert line.strip().startswith("payee: VPA payee.") and "contact cont_" in line and "--allow-payee" in line
    intent = engine.intent(sik)
    assert intent is not None
    approved = CliRunner().invoke(cli, ["holds", "approve", sik, "--as", APPROVER, "--terms",
                                        holds.terms_digest(intent), "--allow-payee", digest])  # fmt: skip
    assert approved.exit_code == 0, approved.output + str(approved.exception)
    assert f"payee {payees['vpa_stranger']} added to the payees of mandate" in approved.output
    engine.settle(sik, {"APPLIED"})
    [record] = payee_allowed_records(engine)
    assert record["payee"]["vpa"].startswith("payee.") and record["fund_account_id"] == payees["vpa_stranger"]
