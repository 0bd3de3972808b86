"""Resolving a quarantine: the operator's word never outranks the rail. "Not applied" is refused while an
entity carrying the stamp exists; "applied" is refused for an entity that does not carry it."""

from __future__ import annotations

import pytest

from interlock.errors import OperatorRefused
from ledger.states import State
from ops import quarantine
from tests.ops.conftest import Operated

OPERATOR = "oncall@example.com"


def _quarantined(operated: Operated, fault: str) -> tuple[str, str]:
    """A refund whose call failed ambiguously (*fault*) and whose rail then stayed unreadable past the
    reconciler's patience: QUARANTINED. Faults are cleared before returning."""
    engine = operated.engine
    pid = engine.payment(189_900)
    engine.rail.set_faults([{"name": fault, "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 20_000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 60_000}}])
    engine.settle(outcome.sik, {"QUARANTINED"})
    engine.rail.clear_faults()
    return pid, outcome.sik


@pytest.fixture
def quick(engine_factory, monkeypatch) -> Operated:  # type: ignore[no-untyped-def]
    from tests.ops.conftest import ops_context_for

    engine = engine_factory(env={"INTERLOCK_RECONCILE_MAX_PASSES": "2", "INTERLOCK_RECONCILE_MIN_DELAY_MS": "100"})
    return Operated(engine, ops_context_for(engine, monkeypatch))


def test_not_applied_is_refused_while_the_stamp_is_on_the_rail(quick: Operated) -> None:
    pid, sik = _quarantined(quick, "ambiguous_504")  # the rail applied it, then answered 504
    assert [i.sik for i in quarantine.list_quarantined(quick.ops)] == [sik]
    ours = [r["entity"]["id"] for r in quick.refunds_of(pid)]
    assert len(ours) == 1
    with pytest.raises(OperatorRefused, match=f"the rail has {ours[0]} carrying this intent's stamp"):
        quarantine.resolve(quick.ops, sik, operator_id=OPERATOR, applied_entity_id=None, not_applied=True,
                           evidence="dashboard shows nothing")  # fmt: skip
    assert quick.engine.intent(sik).state is State.QUARANTINED  # type: ignore[union-attr]
    other = quick.engine.outcome(quick.engine.propose({"payment_id": quick.engine.payment(100_000), "amount": 1000}))
    with pytest.raises(OperatorRefused, match="does not carry the stamp"):
        quarantine.resolve(quick.ops, sik, operator_id=OPERATOR, applied_entity_id=other.rail_entity_id,
                           not_applied=False, evidence=None)  # fmt: skip
    intent = quarantine.resolve(quick.ops, sik, operator_id=OPERATOR, applied_entity_id=ours[0], not_applied=False,
                                evidence="seen in the dashboard")  # fmt: skip
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, ours[0])
    assert quick.engine.rail.count_stamped(sik) == 1


def test_not_applied_after_an_exhaustive_recheck_lets_the_agent_retry_once(quick: Operated) -> None:
    pid, sik = _quarantined(quick, "fail_504")  # the rail never applied it
    with pytest.raises(OperatorRefused, match="needs --evidence"):
        quarantine.resolve(quick.ops, sik, operator_id=OPERATOR, applied_entity_id=None, not_applied=True,
                           evidence=None)  # fmt: skip
    intent = quarantine.resolve(quick.ops, sik, operator_id=OPERATOR, applied_entity_id=None, not_applied=True,
                                evidence="rail support confirmed no refund, case 981")  # fmt: skip
    assert intent.state is State.CONFIRMED_NOT_APPLIED
    conn = quick.engine.ledger()
    finding = conn.execute("SELECT outcome, pagination_exhausted, detail_json FROM recon_findings WHERE sik = ? "
                           "ORDER BY id DESC LIMIT 1", (sik,)).fetchone()  # fmt: skip
    conn.close()
    assert (finding[0], finding[1]) == ("CONFIRMED_NOT_APPLIED", 1) and OPERATOR in finding[2]
    assert quick.refunds_of(pid) == []
    retry = quick.engine.outcome(quick.engine.propose({"payment_id": pid, "amount": 20_000}))
    assert retry.state == "APPLIED" and quick.engine.rail.count_stamped(sik) == 1
