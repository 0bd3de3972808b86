"""One refund end to end, and every ambiguous answer settled by reading the rail — never guessed."""

from __future__ import annotations

from collections.abc import Callable

from ledger import audit
from tests.engine.conftest import Engine


def test_one_refund_end_to_end(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(189900)
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 50000}))
    assert outcome.state == "APPLIED", outcome
    assert outcome.caller_action == "DONE" and outcome.replayed is False
    assert outcome.rail_entity_id and outcome.rail_entity_id.startswith("rfnd_")
    assert outcome.intent is not None and outcome.intent.subject == pid and outcome.intent.amount_minor == 50000
    assert outcome.sik is not None
    assert engine.rail.count_stamped(outcome.sik) == 1
    conn = engine.ledger()
    assert audit.verify_chain(conn) is None
    attempts = conn.execute("SELECT attempt_seq, outcome FROM intent_attempts WHERE sik = ?", (outcome.sik,)).fetchall()
    assert [(a[0], a[1]) for a in attempts] == [(1, "APPLIED")]
    conn.close()


def test_a_retry_with_a_fresh_request_id_is_answered_from_the_ledger(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(189900)
    first = engine.outcome(engine.propose({"payment_id": pid, "amount": 189900}))
    assert first.state == "APPLIED"
    for _ in range(3):  # the payment now has nothing refundable, yet the repeat answers APPLIED (SPEC §10)
        again = engine.outcome(engine.propose({"payment_id": pid, "amount": 189900}))
        assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, first.rail_entity_id)
    assert first.sik is not None and engine.rail.count_stamped(first.sik) == 1


def test_ambiguous_504_after_apply_is_reconciled_to_applied(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(189900)
    engine.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 40000}))
    assert (outcome.state, outcome.caller_action) == ("UNKNOWN", "RETRY_SAME_CALL")
    assert outcome.sik is not None
    engine.rail.clear_faults()
    intent = engine.settle(outcome.sik, {"APPLIED"})
    real = [e for e in engine.rail.entities("refund") if e["entity"]["notes"].get("interlock_sik") == outcome.sik]
    assert len(real) == 1 and intent.rail_entity_id == real[0]["entity"]["id"]
    conn = engine.ledger()
    finding = conn.execute("SELECT outcome, pagination_exhausted FROM recon_findings WHERE sik = ?",
                           (outcome.sik,)).fetchall()  # fmt: skip
    assert [tuple(f) for f in finding] == [("APPLIED", 0)]
    conn.close()


def test_fail_504_is_confirmed_absent_then_retried_once(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(189900)
    engine.rail.set_faults([{"name": "fail_504", "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 30000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    assert engine.rail.count_stamped(outcome.sik) == 0
    engine.rail.clear_faults()
    intent = engine.settle(outcome.sik, {"APPLIED"})
    assert intent.attempt_seq == 2
    assert engine.rail.count_stamped(outcome.sik) == 1
    conn = engine.ledger()
    findings = [tuple(r) for r in conn.execute(
        "SELECT attempt_seq, outcome, pagination_exhausted FROM recon_findings WHERE sik = ? ORDER BY id",
        (outcome.sik,))]  # fmt: skip
    assert findings == [(1, "CONFIRMED_NOT_APPLIED", 1)]
    conn.close()


def test_dup_response_never_records_the_replayed_id(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    earlier = engine.outcome(engine.propose({"payment_id": engine.payment(100000), "amount": 1000}))
    assert earlier.state == "APPLIED"
    pid = engine.payment(189900)
    engine.rail.set_faults([{"name": "dup_response", "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 25000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    assert outcome.rail_entity_id is None, "a replayed response's id must never be recorded as ours"
    engine.rail.clear_faults()
    intent = engine.settle(outcome.sik, {"APPLIED"})
    ours = [e["entity"]["id"] for e in engine.rail.entities("refund")
            if e["entity"]["notes"].get("interlock_sik") == outcome.sik]  # fmt: skip
    assert len(ours) == 1 and intent.rail_entity_id == ours[0] != earlier.rail_entity_id


def test_replica_lag_shorter_than_the_min_delay(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(env={"INTERLOCK_RECONCILE_MIN_DELAY_MS": "1500"})
    pid = engine.payment(189900)
    engine.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0},
                            {"name": "replica_lag", "rate": 1.0, "params": {"lag_ms": 1000}}])  # fmt: skip
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 20000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    intent = engine.settle(outcome.sik, {"APPLIED"})
    assert intent.attempt_seq == 1, "the lagging list must not have been read as absence"
    assert engine.rail.count_stamped(outcome.sik) == 1


def test_partition_longer_than_the_quarantine_threshold(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(env={"INTERLOCK_RECONCILE_MAX_PASSES": "2", "INTERLOCK_RECONCILE_MIN_DELAY_MS": "100"})
    pid = engine.payment(189900)
    engine.rail.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 60000}}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 20000}))
    # The gate could not read the payment: nothing is keyed, nothing recorded, the agent may repeat.
    assert (outcome.state, outcome.reason_code, outcome.caller_action) == (
        "BLOCKED", "G2_RAIL_UNAVAILABLE", "RETRY_SAME_CALL")
    # Now the money call itself fails ambiguously, and then the rail becomes unreadable for longer
    # than the reconciler may wait: it must quarantine, not guess and not retry.
    engine.rail.set_faults([{"name": "fail_504", "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 20000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.set_faults([{"name": "partition", "rate": 1.0, "params": {"duration_ms": 60000}}])
    intent = engine.settle(outcome.sik, {"QUARANTINED"}, timeout_s=30)
    assert intent.attempt_seq == 1, "nothing may be retried while the rail cannot be read"
    engine.rail.clear_faults()
    assert engine.rail.count_stamped(outcome.sik) == 0
    conn = engine.ledger()
    findings = {r[0] for r in conn.execute("SELECT outcome FROM recon_findings WHERE sik = ?", (outcome.sik,))}
    conn.close()
    assert findings == {"INCONCLUSIVE"}
