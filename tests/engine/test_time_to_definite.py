"""Time to definite after an ambiguous answer (issue 14, item 5), as real processes.

A refund carries the rail's idempotency key, so once the rail worker has recorded its ambiguous answer the
reconciler may read the rail one min delay later: an early "absent" can only authorize a retry the rail
answers with the same refund. A settlement has no key (ADR 0010) and still waits out the call's whole
deadline. The times asserted are the rule's own bounds, read from the ledger's timestamps — not speeds.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.engine.conftest import MERCHANT, Engine

MIN_DELAY_MS = 2000  # the default
# Far from the min delay: a refund read a min delay after its answer is well inside it however busy the machine.
RAIL_TIMEOUT_MS = 20000
SETTINGS = {
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": str(MIN_DELAY_MS),
    "INTERLOCK_RAIL_TIMEOUT_MS": str(RAIL_TIMEOUT_MS),
    "INTERLOCK_LEASE_TTL_MS": "30000",  # the default; the deadline must be shorter
}
AMBIGUOUS_504 = [{"name": "ambiguous_504", "rate": 1.0}]


def transitions(engine: Engine, sik: str) -> list[tuple[int, str]]:
    """(ts, state entered) for every transition of the intent, in chain order."""
    conn = engine.ledger()
    try:
        rows = conn.execute("SELECT ts, payload_json FROM audit_log WHERE kind = 'TRANSITION' ORDER BY seq").fetchall()
    finally:
        conn.close()
    payloads = ((int(ts), json.loads(body)) for ts, body in rows)
    return [(ts, p["to"]) for ts, p in payloads if p["sik"] == sik and p["merchant_id"] == MERCHANT]


def first_attempt(engine: Engine, sik: str) -> tuple[int, int]:
    conn = engine.ledger()
    try:
        row = conn.execute("SELECT started_at, finished_at FROM intent_attempts WHERE merchant_id = ? AND sik = ? "
                           "AND attempt_seq = 1", (MERCHANT, sik)).fetchone()  # fmt: skip
    finally:
        conn.close()
    assert row is not None and row[1] is not None, "the rail worker records the end of its call"
    return int(row[0]), int(row[1])


def entered(steps: list[tuple[int, str]], state: str) -> int:
    return next(ts for ts, to in steps if to == state)


def test_a_refund_answered_504_is_read_one_min_delay_after_the_answer(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(env=SETTINGS)
    engine.rail.set_faults(AMBIGUOUS_504)
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 10000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.clear_faults()

    intent = engine.settle(outcome.sik, {"APPLIED"}, timeout_s=RAIL_TIMEOUT_MS / 1000 + 10)
    steps = transitions(engine, outcome.sik)
    assert [to for _, to in steps] == ["AUTHORIZED", "IN_FLIGHT", "UNKNOWN", "RECONCILING", "APPLIED"]
    assert intent.attempt_seq == 1 and engine.rail.count_stamped(outcome.sik) == 1
    started, finished = first_attempt(engine, outcome.sik)
    # Never before the min delay after the answer: the rail has no read-your-writes.
    assert entered(steps, "RECONCILING") >= finished + MIN_DELAY_MS
    # ...and not the whole call deadline later, as a key-less call must wait.
    assert entered(steps, "APPLIED") - entered(steps, "UNKNOWN") < RAIL_TIMEOUT_MS
    assert entered(steps, "RECONCILING") < started + RAIL_TIMEOUT_MS


def test_a_settlement_answered_504_still_waits_out_the_call_deadline(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(env=SETTINGS)
    engine.rail.set_balance(1_000_000)
    engine.rail.set_faults(AMBIGUOUS_504)
    outcome = engine.outcome(engine.propose({"amount": 25000}, tool="create_instant_settlement"))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.clear_faults()

    intent = engine.settle(outcome.sik, {"APPLIED"}, timeout_s=(RAIL_TIMEOUT_MS + MIN_DELAY_MS) / 1000 + 15)
    steps = transitions(engine, outcome.sik)
    assert [to for _, to in steps] == ["AUTHORIZED", "IN_FLIGHT", "UNKNOWN", "RECONCILING", "APPLIED"]
    assert intent.attempt_seq == 1 and engine.rail.count_stamped(outcome.sik) == 1
    started, _ = first_attempt(engine, outcome.sik)
    # No idempotency key: a slow rail may apply it until the call's deadline, so absence means nothing before.
    assert entered(steps, "RECONCILING") >= started + RAIL_TIMEOUT_MS + MIN_DELAY_MS
