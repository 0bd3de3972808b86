"""Resolving a quarantine: the operator's word never outranks the rail. "Not applied" is refused while an
entity carrying the stamp exists; "applied" is refused for an entity that does not carry it."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from interlock.errors import OperatorRefused
from ledger.states import State
from ops import quarantine
from tests.mandates import MERCHANT
from tests.ops.conftest import APPROVER, OTHER, OTHER_TOKEN, Operated

OPERATOR = APPROVER  # only an approver the intent's mandate names may resolve its quarantine


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


def _written(operated: Operated) -> tuple[int, int]:
    conn = operated.engine.ledger()
    try:
        row = conn.execute("SELECT (SELECT COUNT(*) FROM audit_log), (SELECT COUNT(*) FROM recon_findings)").fetchone()
        return int(row[0]), int(row[1])
    finally:
        conn.close()


def test_only_an_approver_the_mandate_names_may_resolve_a_quarantine(quick: Operated) -> None:
    """Issue 46 item 3, the rule a hold already had: one the intent's mandate does not name is refused, naming who
    may decide, before the rail is read and with nothing written — with her own credential (as the console passes
    it) or a name typed at the CLI. The named approver then resolves it."""
    from interlock.cli import cli

    pid, sik = _quarantined(quick, "fail_504")
    before = _written(quick)
    named = re.escape(f"only {APPROVER} may decide for merchant {MERCHANT}")
    with pytest.raises(OperatorRefused, match=f"{OTHER!r} is not an approver of mandate mnd_demo_support .*{named}"):
        quarantine.resolve(quick.ops, sik, operator_id=OTHER, authenticated=quick.approver(OTHER_TOKEN),
                           applied_entity_id=None, not_applied=True, evidence="checked the dashboard")  # fmt: skip
    typed = CliRunner().invoke(cli, ["quarantine", "resolve", sik, "--not-applied", "--evidence", "checked",
                                     "--as", "oncall@example.com"])  # fmt: skip
    said = typed.output + str(typed.exception or "")
    assert typed.exit_code != 0 and "'oncall@example.com' is not an approver of mandate" in said, said
    assert _written(quick) == before, "a refusal writes nothing"
    assert quick.engine.intent(sik).state is State.QUARANTINED  # type: ignore[union-attr]
    intent = quarantine.resolve(quick.ops, sik, operator_id=APPROVER, authenticated=quick.approver(),
                                applied_entity_id=None, not_applied=True, evidence="rail support: no refund")
    assert intent.state is State.CONFIRMED_NOT_APPLIED and quick.refunds_of(pid) == []
