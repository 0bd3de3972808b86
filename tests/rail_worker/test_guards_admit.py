"""Guards of the admit transaction (rail_worker/admit.py, and ledger/limits.py as admit uses it) that no other
test would miss (issue 17, item 7): each test here fails when the guard it names is deleted. In-process, over a
real SQLite ledger, with the injectable clock of tests/engine/send_world.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.mandate import Mandate
from interlock.messages import CallerAction, Decision, IntentTerms, Verdict
from ledger.db import open_ledger
from ledger.states import State
from rail_worker.admit import admit
from rail_worker.execute import execute
from rails.razorpay import RailError, RailErrorKind
from tests.engine.send_world import SETTLEMENT, World, make_world
from tests.mandates import AGENT, MERCHANT, make_mandate

DAY = 86_400_000


@pytest.fixture(params=[False, True], ids=["one-transaction-each", "group-commit"])
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch, group_commit=request.param)
    monkeypatch.setattr("rail_worker.admit.now_ms", made.clock)
    yield made
    made.close()


def _mandate(world: World, **changes: object) -> Mandate:
    return make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                         "limits.fee_budgets": {}, "approval.hold_above_minor": None, **changes})  # fmt: skip


def _decision(world: World, sik: str, *, verdict: str = "ALLOW", amount: int = 50000, request_id: str | None = None,
              mandate: Mandate | None = None) -> Decision:  # fmt: skip
    """What a gate worker sends to the rail queue for a settlement it judged under *mandate*."""
    mandate = mandate or world.mandate
    terms = IntentTerms(merchant_id=MERCHANT, tool=SETTLEMENT, subject="balance", amount_minor=amount, currency="INR")
    return Decision(
        request_id=request_id or f"req-{sik[:4]}-{verdict}", agent_id=AGENT, merchant_id=MERCHANT, tool=SETTLEMENT,
        sik=sik, terms=terms, params={"amount": amount, "notes": {}}, params_hash="ph", verdict=Verdict(verdict),
        reason_code={"ALLOW": "ALLOWED", "HOLD": "G2_ABOVE_HOLD", "BLOCK": "G6_TOOL_DRIFT"}[verdict], results=[],
        mandate_id=mandate.mandate_id, mandate_hash=mandate.mandate_hash, operation_ref=None, window=1,
        decided_at_ms=world.clock(),
    )  # fmt: skip


def _intent_count(world: World) -> int:
    return int(open_ledger(world.path).execute("SELECT COUNT(*) FROM intents").fetchone()[0])


# -- the mandate changed between the gate and admit -----------------------------------------------------------------


def test_a_decision_judged_under_a_replaced_mandate_is_refused_at_admit(world: World) -> None:
    stale = world.mandate  # the gate worker judged under this one ...
    world.mandate = _mandate(world, purpose="a different mandate")  # ... a person replaced it since
    admission = admit(world.runtime(), _decision(world, "Q" * 32, mandate=stale))
    assert admission.execute is None
    assert admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.reason_code) == ("BLOCKED", "G1_MANDATE_CHANGED")
    assert _intent_count(world) == 0


# -- G3, authoritatively, inside the admit transaction -----------------------------------------------------------------


def test_two_decisions_from_one_snapshot_cannot_pass_a_window_together(world: World) -> None:
    # Two gate workers read the same ledger snapshot (0 calls today) and both ALLOW; the window has room for one.
    world.mandate = _mandate(world, **{"limits.windows": [{"window_ms": DAY, "max_calls": 1}]})
    rt = world.runtime()
    first = admit(rt, _decision(world, "Q" * 32, amount=1000))
    second = admit(rt, _decision(world, "P" * 32, amount=2000))
    assert first.execute is not None and first.execute.state is State.AUTHORIZED
    assert second.execute is None and second.outcome is not None
    assert (second.outcome.state, second.outcome.reason_code) == ("BLOCKED", "G3_WINDOW_CALLS")
    assert _intent_count(world) == 1


@pytest.mark.parametrize(("window_currency", "admitted"), [("USD", True), ("INR", False)])
def test_an_amount_window_counts_only_calls_in_its_own_currency(world: World, window_currency: str,
                                                                 admitted: bool) -> None:  # fmt: skip
    # A USD 10.00 window says nothing about an INR 500.00 settlement; an INR 10.00 window refuses it.
    window = {"window_ms": DAY, "max_amount_minor": 1000, "currency": window_currency}
    world.mandate = _mandate(world, **{"limits.windows": [window]})
    admission = admit(world.runtime(), _decision(world, "Q" * 32, amount=50000))
    if admitted:
        assert admission.execute is not None and admission.execute.state is State.AUTHORIZED
    else:
        assert admission.outcome is not None and admission.outcome.reason_code == "G3_WINDOW_AMOUNT"


# -- only an ALLOW reopens a FAILED_TERMINAL / CONFIRMED_NOT_APPLIED intent --------------------------------------------


def _failed_terminal(world: World, sik: str) -> None:
    rt = world.runtime()
    admission = admit(rt, _decision(world, sik))
    assert admission.execute is not None
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400", method="POST", path="/x", http_status=400,
                                  code="BAD_REQUEST_ERROR", description="Insufficient balance")  # fmt: skip
    execute(rt, MERCHANT, sik, request_id=None)
    world.rail.reject = None
    assert world.intent(sik).state is State.FAILED_TERMINAL


def test_a_repeat_the_gates_refused_does_not_reopen_a_failed_intent_and_says_why(world: World) -> None:
    sik = "Q" * 32
    _failed_terminal(world, sik)
    rt = world.runtime()
    repeat = admit(rt, _decision(world, sik, verdict="BLOCK", request_id="the-repeat"))
    assert repeat.execute is None, "a refused repeat reopened the intent for another money call"
    assert repeat.outcome is not None
    assert (repeat.outcome.state, repeat.outcome.replayed, repeat.outcome.reason_code,
            repeat.outcome.caller_action) == ("FAILED_TERMINAL", True, "G6_TOOL_DRIFT", CallerAction.DO_NOT_RETRY)
    assert world.intent(sik).state is State.FAILED_TERMINAL
    # The control: the same repeat, allowed by every gate, does reopen it.
    allowed = admit(rt, _decision(world, sik, request_id="allowed-repeat"))
    assert allowed.execute is not None and allowed.execute.state is State.AUTHORIZED



# -- ADR 0024: the repeat of a not-applied call is judged afresh, and its answer says what came of that ---------------


def test_a_held_repeat_of_a_failed_intent_waits_for_a_person_under_the_mandate_configured_now(world: World) -> None:
    sik = "Q" * 32
    _failed_terminal(world, sik)
    world.mandate = _mandate(world, purpose="re-pinned with a hold", **{"approval.hold_above_minor": 1000})
    world.clock.advance(11)
    repeat = admit(world.runtime(), _decision(world, sik, verdict="HOLD", request_id="the-repeat"))
    assert repeat.execute is None, "a held repeat was sent without a person's approval"
    assert repeat.outcome is not None
    assert (repeat.outcome.state, repeat.outcome.caller_action, repeat.outcome.reason_code) == (
        "HELD", CallerAction.WAIT_FOR_APPROVAL, "G2_ABOVE_HOLD")
    intent = world.intent(sik)
    assert (intent.state, intent.mandate_hash, intent.hold_expires_at, intent.attempt_seq) == (
        State.HELD, world.mandate.mandate_hash, world.clock() + world.mandate.approval.hold_expiry_ms, 1)


def _withdrawn(world: World, sik: str) -> Mandate:
    """An AUTHORIZED settlement withdrawn before it was sent: its mandate was replaced (G1_MANDATE_CHANGED)."""
    admission = admit(world.runtime(), _decision(world, sik))
    assert admission.execute is not None
    stale = world.mandate
    lower = {"window_ms": DAY, "max_amount_minor": 1000, "currency": "INR"}
    world.mandate = _mandate(world, purpose="replaced: lower limits", **{"limits.windows": [lower]})
    execute(world.runtime(), MERCHANT, sik, request_id=None)
    assert (world.intent(sik).state, world.intent(sik).reason_code) == (State.CONFIRMED_NOT_APPLIED,
                                                                        "G1_MANDATE_CHANGED")  # fmt: skip
    assert world.rail.calls == []
    return stale


def test_a_withdrawn_call_the_new_mandate_refuses_is_answered_with_the_refusal_not_told_to_repeat(
    world: World,
) -> None:
    # Finding F3 of the simulator (docs/simulation.md): this repeat used to be answered CONFIRMED_NOT_APPLIED with
    # RETRY_SAME_CALL every time, so the agent repeated it for ever.
    sik = "Q" * 32
    _withdrawn(world, sik)
    repeat = admit(world.runtime(), _decision(world, sik, request_id="the-repeat"))
    assert repeat.execute is None
    assert repeat.outcome is not None
    assert (repeat.outcome.state, repeat.outcome.replayed, repeat.outcome.reason_code,
            repeat.outcome.caller_action) == ("CONFIRMED_NOT_APPLIED", True, "G3_WINDOW_AMOUNT",
                                              CallerAction.DO_NOT_RETRY)  # fmt: skip
    assert (world.intent(sik).state, world.intent(sik).reason_code) == (State.CONFIRMED_NOT_APPLIED,
                                                                        "G1_MANDATE_CHANGED")  # fmt: skip


def test_a_withdrawn_calls_repeat_judged_under_the_replaced_mandate_is_told_to_repeat_again(world: World) -> None:
    sik = "Q" * 32
    stale = _withdrawn(world, sik)
    repeat = admit(world.runtime(), _decision(world, sik, request_id="judged-stale", mandate=stale))
    assert repeat.outcome is not None and repeat.execute is None
    assert (repeat.outcome.state, repeat.outcome.reason_code, repeat.outcome.caller_action) == (
        "CONFIRMED_NOT_APPLIED", "G1_MANDATE_CHANGED", CallerAction.RETRY_SAME_CALL)


def test_a_fresh_call_judged_under_a_replaced_mandate_is_told_to_repeat(world: World) -> None:
    stale = world.mandate
    world.mandate = _mandate(world, purpose="a different mandate")
    admission = admit(world.runtime(), _decision(world, "P" * 32, mandate=stale))
    assert admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.caller_action) == ("BLOCKED", CallerAction.RETRY_SAME_CALL)


def test_a_call_for_an_agent_whose_mandate_was_removed_is_refused_for_good(world: World) -> None:
    rt = world.runtime()
    rt.mandates = type(rt.mandates)({})  # a person removed the agent's mandate after the gate judged the call
    admission = admit(rt, _decision(world, "P" * 32))
    assert admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.reason_code, admission.outcome.caller_action) == (
        "BLOCKED", "G1_NO_MANDATE", CallerAction.DO_NOT_RETRY)
