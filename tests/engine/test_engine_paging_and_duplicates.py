"""Absence on page one is not absence; one operation is one intent however it is delivered."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from interlock.queues import ADMIT_JOB, rail_queue, rq_queue
from rails.pager import find_stamped
from rails.razorpay import RazorpayClient
from tests.engine.conftest import Engine
from tests.procs import wait_until


def test_deep_page_refund_on_page_three_is_found(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(10_000_000, prior_refunds=250)  # 250 old refunds: ours is listed at position 251
    engine.rail.set_faults([{"name": "ambiguous_504", "rate": 1.0}, {"name": "deep_page", "rate": 1.0}])
    outcome = engine.outcome(engine.propose({"payment_id": pid, "amount": 10000}))
    assert outcome.state == "UNKNOWN" and outcome.sik is not None
    engine.rail.set_faults([{"name": "deep_page", "rate": 1.0}])
    intent = engine.settle(outcome.sik, {"APPLIED"})
    assert intent.attempt_seq == 1 and engine.rail.count_stamped(outcome.sik) == 1
    conn = engine.ledger()
    pages = conn.execute("SELECT pages_scanned FROM recon_findings WHERE sik = ?", (outcome.sik,)).fetchone()[0]
    conn.close()
    assert pages == 3


def test_a_pager_that_stops_at_page_one_would_not_conclude_absence(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(start=False)
    pid = engine.payment(10_000_000, prior_refunds=250)
    engine.rail.set_faults([{"name": "deep_page", "rate": 1.0}])
    client = RazorpayClient(engine.rail.url, engine.rail.key_id, engine.rail.key_secret)
    from interlock.sik import idempotency_key_for, receipt_for, stamp_notes

    sik = "D" * 32
    client.create_refund(pid, 500, notes=stamp_notes(sik), receipt=receipt_for(sik),
                         idempotency_key=idempotency_key_for(sik))  # fmt: skip
    one_page = find_stamped(client, "create_refund", pid, sik, max_pages=1)
    assert one_page.matched_entity_id is None
    assert one_page.exhausted is False, "one full page proves nothing: it must not count as exhausted"
    full = find_stamped(client, "create_refund", pid, sik)
    assert full.matched_entity_id is not None and full.pages_scanned == 3


def test_the_same_decision_delivered_twice_makes_one_intent(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(189900)
    request_id = engine.propose({"payment_id": pid, "amount": 12345})
    first = engine.outcome(request_id)
    assert first.state == "APPLIED" and first.sik is not None
    queue = rq_queue(rail_queue(), engine.redis)
    from rq.job import Job
    from rq.serializers import JSONSerializer

    decision_json = Job.fetch(f"decision-{request_id}", connection=engine.redis, serializer=JSONSerializer).args[0]
    queue.enqueue(ADMIT_JOB, decision_json)  # the very same Decision again
    second = engine.outcome(request_id)
    assert (second.state, second.replayed, second.rail_entity_id) == ("APPLIED", True, first.rail_entity_id)
    assert engine.rail.count_stamped(first.sik) == 1
    conn = engine.ledger()
    assert conn.execute("SELECT COUNT(*) FROM decisions WHERE request_id = ?", (request_id,)).fetchone()[0] == 1
    conn.close()


def test_identical_proposals_racing_through_two_gate_workers(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(gate_workers=2)
    pid = engine.payment(189900)
    requests = [engine.propose({"payment_id": pid, "amount": 70000}) for _ in range(8)]
    outcomes = [engine.outcome(r) for r in requests]
    siks = {o.sik for o in outcomes}
    assert len(siks) == 1
    assert {o.state for o in outcomes} == {"APPLIED"}, [(o.state, o.reason_code, o.replayed) for o in outcomes]
    assert sum(not o.replayed for o in outcomes) == 1, [(o.state, o.reason_code, o.replayed) for o in outcomes]
    sik = siks.pop()
    assert sik is not None and engine.rail.count_stamped(sik) == 1
    conn = engine.ledger()
    assert conn.execute("SELECT COUNT(*) FROM intents WHERE subject_id = ?", (pid,)).fetchone()[0] == 1
    conn.close()


def test_a_second_rail_worker_refuses_to_start(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    rail = engine.stack.actors["rail"]
    wait_until(lambda: "holds the lease" in rail.log(), timeout=20, what="the first rail worker's lease")
    env = engine.stack.base_env()
    second = subprocess.run([sys.executable, "-m", "interlock.cli", "rail-worker"], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert second.returncode != 0
    assert "is held by rail:" in second.stderr and "refusing to start" in second.stderr
    assert rail.alive()


def test_interlock_status_reports_states_lease_and_queues(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    outcome = engine.outcome(engine.propose({"payment_id": engine.payment(100000), "amount": 5000}))
    assert outcome.state == "APPLIED"
    result = subprocess.run([sys.executable, "-m", "interlock.cli", "status", "--json"], env=engine.stack.base_env(),
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout)
    assert report["intents_by_state"] == {"APPLIED": 1}
    assert report["oldest_unknown_age_ms"] is None
    assert report["rail_worker_lease"]["live"] is True and report["rail_worker_lease"]["epoch"] == 1
    assert report["queues"]["gates"] == 0
