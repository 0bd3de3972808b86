"""Many money calls in flight from the one rail worker (issue 14): every call still commits IN_FLIGHT before its
request leaves, nothing is paid twice, and calls admitted together can never pass a limit together. Real
processes, the sandbox rail behind a witness that holds money calls for 200 ms and checks the ledger."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interlock.messages import CallerAction, Outcome
from interlock.queues import rail_queue, rq_queue
from ledger import audit
from tests.engine.conftest import Engine
from tests.engine.ledger_witness import LedgerWitness
from tests.mandates import write_mandate
from tests.procs import wait_until

DAY = 86_400_000
ROOMY = {"limits.windows": [{"window_ms": DAY, "max_calls": 10_000, "max_amount_minor": 10**12, "currency": "INR"}],
         "limits.fee_budgets": {}, "approval.hold_above_minor": None}  # fmt: skip


def _engine(engine_factory: Callable[..., Engine], tmp_path: Path, mandate: dict[str, Any],
            **env: str) -> tuple[Engine, LedgerWitness]:  # fmt: skip
    path = write_mandate(tmp_path / "mandate.yaml", mandate)
    engine = engine_factory(gate_workers=2, start=False, env={"INTERLOCK_MANDATE": str(path), **env})
    witness = LedgerWitness(engine.rail.url, engine.stack.ledger_path).__enter__()
    engine.stack.env["INTERLOCK_RAIL_URL"] = witness.url
    engine.stack.start_engine()
    return engine, witness


def _all(engine: Engine, calls: list[tuple[dict[str, Any], str]]) -> list[Outcome]:
    """Every call sent at once, then each repeated (the same call) while its answer says RETRY_SAME_CALL, as an
    agent must: on a loaded machine a call may pass its deadline and come back UNKNOWN until it is reconciled."""
    requests = [engine.propose(args, tool=tool) for args, tool in calls]
    outcomes = [engine.outcome(r, timeout_s=90) for r in requests]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pending = [i for i, o in enumerate(outcomes) if o.caller_action is CallerAction.RETRY_SAME_CALL]
        if not pending:
            break
        repeats = {i: engine.propose(calls[i][0], tool=calls[i][1]) for i in pending}
        for i, request_id in repeats.items():
            outcomes[i] = engine.outcome(request_id, timeout_s=90)
    return outcomes


def test_two_hundred_refunds_in_flight_together_each_commit_before_they_leave(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    engine, witness = _engine(engine_factory, tmp_path, ROOMY, INTERLOCK_RAIL_CONCURRENCY="64")
    try:
        calls = [({"payment_id": engine.payment(10_000), "amount": 1_000}, "create_refund") for _ in range(200)]
        outcomes = _all(engine, calls)
    finally:
        witness.__exit__()
    assert Counter(o.state for o in outcomes) == {"APPLIED": 200}, Counter((o.state, o.reason_code) for o in outcomes)
    assert all(o.sik is not None and engine.rail.count_stamped(o.sik) == 1 for o in outcomes)
    assert witness.violations == [], witness.violations[:5]
    assert witness.money_calls == 200
    assert witness.max_concurrent > 4, f"calls went out one at a time ({witness.max_concurrent} at most)"
    ledger = engine.ledger()
    assert audit.verify_chain(ledger) is None


def test_a_retried_refund_commits_in_flight_before_it_leaves(engine_factory: Callable[..., Engine],
                                                            tmp_path: Path) -> None:  # fmt: skip
    # The first call starts its attempt in its admission's transaction; the retry the reconciler authorizes after a
    # 504 that applied nothing comes as an execute job and starts its attempt on its own (begin_attempt). The
    # witness checks I2 on both requests as they arrive.
    engine, witness = _engine(engine_factory, tmp_path, ROOMY)
    try:
        pid = engine.payment(10_000)
        engine.rail.set_faults([{"name": "fail_504", "rate": 1.0}])
        first = engine.outcome(engine.propose({"payment_id": pid, "amount": 1_000}))
        assert first.state == "UNKNOWN" and first.sik is not None, first
        engine.rail.clear_faults()
        intent = engine.settle(first.sik, {"APPLIED"}, timeout_s=60)
    finally:
        witness.__exit__()
    assert witness.violations == [], witness.violations
    assert witness.money_calls == 2 and engine.rail.count_stamped(first.sik) == 1
    conn = engine.ledger()
    attempts = [row[0] for row in conn.execute(
        "SELECT outcome FROM intent_attempts WHERE sik = ? ORDER BY attempt_seq", (first.sik,))]  # fmt: skip
    conn.close()
    assert attempts == ["AMBIGUOUS", "APPLIED"] and intent.rail_entity_id is not None


def test_calls_admitted_together_never_pass_a_window(engine_factory: Callable[..., Engine], tmp_path: Path) -> None:
    mandate = {**ROOMY, "limits.windows": [{"window_ms": DAY, "max_calls": 10}]}
    engine, witness = _engine(engine_factory, tmp_path, mandate, INTERLOCK_RAIL_CONCURRENCY="64")
    try:
        outcomes = _all(engine, [({"payment_id": engine.payment(10_000), "amount": 1_000}, "create_refund")
                                 for _ in range(30)])  # fmt: skip
    finally:
        witness.__exit__()
    states = Counter((o.state, o.reason_code) for o in outcomes)
    assert states[("APPLIED", None)] == 10, states
    assert states[("BLOCKED", "G3_WINDOW_CALLS")] == 20, states


def test_refunds_admitted_together_never_pass_what_the_payment_allows(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    engine, witness = _engine(engine_factory, tmp_path, ROOMY, INTERLOCK_RAIL_CONCURRENCY="64")
    try:
        pid = engine.payment(100_000)
        outcomes = _all(engine, [({"payment_id": pid, "amount": 5_000, "interlock_distinct_reason": f"line {i}"},
                                  "create_refund") for i in range(30)])  # fmt: skip
    finally:
        witness.__exit__()
    applied = [o for o in outcomes if o.state == "APPLIED"]
    assert applied, "some refunds must go through"
    assert sum(o.intent.amount_minor for o in applied if o.intent) <= 100_000
    assert {o.state for o in outcomes} <= {"APPLIED", "BLOCKED"}, "the rail never had to refuse an over-refund"
    assert {o.reason_code for o in outcomes if o.state == "BLOCKED"} <= {"G2_EXCEEDS_REFUNDABLE", "G2_STALE_RAIL_READ"}
    refunded = sum(e["entity"]["amount"] for e in engine.rail.entities("refund") if e["entity"]["payment_id"] == pid)
    assert refunded == sum(o.intent.amount_minor for o in applied if o.intent)


def test_settlements_admitted_together_never_pass_the_fee_budget(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    # Each 1,000,000 settlement projects 0.3% + 18% tax = 3,540 of fees: a 20,000 budget holds five.
    mandate = {**ROOMY, "limits.fee_budgets": {"INR": {"window_ms": DAY, "max_fee_minor": 20_000}}}
    engine, witness = _engine(engine_factory, tmp_path, mandate, INTERLOCK_RAIL_CONCURRENCY="64")
    try:
        engine.rail.set_balance(100_000_000)
        outcomes = _all(engine, [({"amount": 1_000_000, "interlock_distinct_reason": f"batch {i}"},
                                  "create_instant_settlement") for i in range(12)])  # fmt: skip
    finally:
        witness.__exit__()
    states = Counter((o.state, o.reason_code) for o in outcomes)
    assert states[("APPLIED", None)] == 5, states
    assert states[("BLOCKED", "G3_FEE_BUDGET")] == 7, states


def test_a_rail_worker_killed_with_many_calls_in_flight_pays_each_once(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    path = write_mandate(tmp_path / "mandate.yaml", ROOMY)
    engine = engine_factory(gate_workers=2, start=False, env={
        "INTERLOCK_MANDATE": str(path), "INTERLOCK_RAIL_CONCURRENCY": "64", "INTERLOCK_RAIL_TIMEOUT_MS": "5000",
        "INTERLOCK_LEASE_TTL_MS": "10000"})  # fmt: skip
    # Half the calls are held before the rail sees them, half after it applied them (their answers late).
    with LedgerWitness(engine.rail.url, engine.stack.ledger_path, money_delay_ms=3000, split=True) as witness:
        engine.stack.env["INTERLOCK_RAIL_URL"] = witness.url
        engine.stack.start_engine()
        requests = [engine.propose({"payment_id": engine.payment(10_000), "amount": 1_000}) for _ in range(48)]
        wait_until(lambda: witness.out >= 32, timeout=60, what="32 calls in flight")
        engine.stack.actors["rail"].kill()
        engine.stack.start_actor("rail", ["rail-worker", "--wait-lease", "30"])
        queue = rq_queue(rail_queue(), engine.redis)
        wait_until(lambda: queue.count == 0, timeout=60, what="the restarted worker to take every queued decision")
        assert len(requests) == 48
        conn = engine.ledger()
        siks = [r[0] for r in conn.execute("SELECT sik FROM intents")]
        assert len(siks) >= 32
        settled = [engine.settle(sik, {"APPLIED", "FAILED_TERMINAL", "BLOCKED", "QUARANTINED"}, timeout_s=90)
                   for sik in siks]  # fmt: skip
    assert witness.violations == [], witness.violations[:5]
    for intent in settled:
        stamped = engine.rail.count_stamped(intent.sik)
        assert stamped <= 1, f"{intent.sik} paid {stamped} times"
        assert (intent.state.value == "APPLIED") == (stamped == 1), f"{intent.sik}: ledger {intent.state} vs rail"
    assert audit.verify_chain(engine.ledger()) is None
