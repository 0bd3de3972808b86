"""APPLIED only on the intent's terms (issue 25 item 7, ADR 0016): the rail worker's own answer, a fenced answer
and a kept attempt row that carry our stamp on another payment, amount or currency put the intent in QUARANTINED
with both sets of terms on the audit record, never APPLIED, and nothing is sent again. In-process over a real
SQLite ledger with the scripted rail (tests/engine/send_world.py) answering with other terms."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from interlock.errors import OperatorRefused
from interlock.mandate import MandateStore
from ledger import leases
from ledger.db import open_ledger
from ledger.states import State
from ops import quarantine
from ops.context import OpsContext
from rail_worker import lease as lease_module
from rail_worker.execute import execute
from rails.models import Refund, Settlement
from tests.engine import send_world
from tests.engine.send_world import REFUND, SETTLEMENT, World
from tests.mandates import AGENT, MERCHANT

SIK = "S" * 32
world = send_world.world  # the fixture: one world per commit mode


def _answers_refund_with(world: World, **changes: Any) -> None:
    def create_refund(payment_id: str, amount: int | None, *, notes: dict[str, Any] | None = None,
                      receipt: str | None = None, **_: Any) -> Refund:  # fmt: skip
        body = {"id": "rfnd_FAKE000000001", "amount": amount, "currency": "INR", "payment_id": payment_id,
                "receipt": receipt, "notes": notes or [], "status": "processed", **changes}  # fmt: skip
        return world.rail._money(notes, lambda: Refund.from_raw(body))  # type: ignore[no-any-return]

    world.rail.create_refund = create_refund  # type: ignore[method-assign]


def _answers_settlement_with(world: World, **changes: Any) -> None:
    def create_instant_settlement(amount: int | None = None, *, notes: dict[str, Any] | None = None,
                                  **_: Any) -> Settlement:  # fmt: skip
        body = {"id": "setlod_FAKE00000001", "amount_requested": amount, "amount_settled": 0, "fees": 3, "tax": 1,
                "currency": "INR", "status": "created", "notes": notes or [], **changes}  # fmt: skip
        return world.rail._money(notes, lambda: Settlement.from_raw(body))  # type: ignore[no-any-return]

    world.rail.create_instant_settlement = create_instant_settlement  # type: ignore[method-assign]


def _last_transition(world: World) -> dict[str, Any]:
    row = open_ledger(world.path).execute(
        "SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq DESC LIMIT 1").fetchone()
    return dict(json.loads(row[0]))


@pytest.mark.parametrize("changes", [
    {"amount": 1, "currency": "USD", "payment_id": "pay_OTHER"},  # applied_without_terms_check.py
    {"payment_id": "pay_OTHER"},
    {"amount": 1},
    {"currency": "USD"},
])  # fmt: skip
def test_a_stamped_refund_on_other_terms_is_quarantined_not_applied(world: World, changes: dict[str, Any]) -> None:
    world.authorized(REFUND, amount=189900)
    _answers_refund_with(world, **changes)
    rt = world.runtime()
    outcome = execute(rt, MERCHANT, SIK, request_id="req-1")
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id, intent.reason_code) == (State.QUARANTINED, None,
                                                                         "RAIL_TERMS_MISMATCH")  # fmt: skip
    assert outcome is not None and outcome.state == "QUARANTINED"
    assert world.attempts() == [(1, "TERMS_MISMATCH")]
    record = _last_transition(world)
    assert (record["event"], record["from"], record["to"]) == ("TERMS_MISMATCH", "IN_FLIGHT", "QUARANTINED")
    assert record["detail"]["intent_terms"] == {"subject": "pay_SEND0000001", "amount_minor": 189900,
                                                "currency": "INR", "full_balance": False}  # fmt: skip
    assert record["detail"]["entity_terms"] == {
        "subject": changes.get("payment_id", "pay_SEND0000001"), "amount_minor": changes.get("amount", 189900),
        "currency": changes.get("currency", "INR")}  # fmt: skip
    assert record["detail"]["rail_entity_id"] == "rfnd_FAKE000000001"
    # A repeat is not sent again: QUARANTINED is a person's to decide.
    assert execute(rt, MERCHANT, SIK, request_id=None) is None
    assert len(world.rail.calls) == 1


def test_a_stamped_refund_on_the_intents_terms_is_applied(world: World) -> None:
    world.authorized(REFUND, amount=189900)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.APPLIED and world.attempts() == [(1, "APPLIED")]


def test_a_settlement_for_another_amount_is_quarantined(world: World) -> None:
    world.authorized(SETTLEMENT)
    _answers_settlement_with(world, amount_requested=40000)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.QUARANTINED
    assert _last_transition(world)["detail"]["differ"] == ["amount_minor"]


def test_a_fenced_stamped_answer_on_other_terms_quarantines_the_retry_instead_of_paying_again(world: World) -> None:
    # As fenced_resend.py, with the late answer on other terms: it must neither settle the intent APPLIED nor let
    # the retry the reconciler authorized meanwhile be sent.
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    _answers_settlement_with(world, currency="USD")

    def worker_a_looks_dead() -> None:
        world.watch()
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        lease_module.boot(world.runtime("rail:B", take_lease=False))
        world.rail.listed = False
        world.reconciler().sweep()
        world.rail.listed = True
        assert world.intent().state is State.AUTHORIZED

    world.rail.during_call = worker_a_looks_dead
    execute(a, MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.QUARANTINED
    assert world.attempts() == [(1, "FENCED_TERMS_MISMATCH")]
    b = world.runtime("rail:B", take_lease=False)
    b.lease = leases.get_lease(b.ledger, leases.RAIL_WORKER_LEASE)
    execute(b, MERCHANT, SIK, request_id=None)
    assert len(world.rail.calls) == 1, "nothing sent again"
    assert world.intent().state is State.QUARANTINED


APPROVER = "ops_lead@example.com"  # whom the example mandate names: the only one who may resolve its quarantines


@dataclasses.dataclass
class _Ops(OpsContext):
    """The operator's tools against this world's ledger and scripted rail."""

    scripted: Any = None
    mandate: Any = None

    def mandates(self) -> MandateStore:
        return MandateStore({AGENT: self.mandate})

    def rail(self) -> Any:
        rail = self.scripted
        rail.close = lambda: None
        return rail


def test_a_person_cannot_resolve_as_not_applied_what_the_rail_answered_with_our_stamp(world: World) -> None:
    # Found by the simulator (seed 378): the rail answered with our stamp on other terms (QUARANTINED), and the
    # operator's paging of a list that did not show the refund yet ran to the end. "Not applied" was accepted,
    # and the ledger said CONFIRMED_NOT_APPLIED for money that had moved.
    world.authorized(REFUND, amount=189900)
    _answers_refund_with(world, amount=189800)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.intent().state is State.QUARANTINED
    world.rail.listed = False  # the list lags behind the answer
    ops = _Ops(settings=world.settings, scripted=world.rail, mandate=world.mandate)
    with pytest.raises(OperatorRefused, match="answered attempt 1 with rfnd_FAKE000000001"):
        quarantine.resolve(ops, SIK, operator_id=APPROVER, applied_entity_id=None, not_applied=True,
                           evidence="paged the rail to the end")  # fmt: skip
    assert world.intent().state is State.QUARANTINED
