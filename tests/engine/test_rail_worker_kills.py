"""SIGKILL the rail worker at each of its failpoints, restart it, and the ledger and the rail agree:
never two entities, nothing left UNKNOWN, the audit chain intact."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledger import audit
from tests.engine.conftest import Engine
from tests.procs import wait_until

POINTS = [
    "rail.before_wal",
    "rail.after_wal_before_call",
    "rail.during_call",
    "rail.after_call_before_commit",
    "rail.after_commit_before_ack",
]


@pytest.mark.parametrize("point", POINTS)
def test_kill_the_rail_worker_at(point: str, engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory(kill_at={"rail": point})
    rail = engine.stack.actors["rail"]
    pid = engine.payment(189900)
    if point == "rail.during_call":
        # The rail applies 300 ms after the request arrived; the worker dies 5 ms into the call.
        engine.rail.set_faults([{"name": "slow", "rate": 1.0, "params": {"delay_ms": 300}}])
    engine.propose({"payment_id": pid, "amount": 45000})
    wait_until(lambda: not rail.alive(), timeout=30, what=f"the rail worker to die at {point}")
    assert rail.returncode() == -9, rail.log()[-2000:]
    assert f"failpoint {point}: SIGKILL" in rail.log()
    engine.rail.clear_faults()
    engine.stack.start_actor("rail", ["rail-worker", "--wait-lease", "30"])
    if point == "rail.before_wal":
        # The attempt starts in the admission's transaction (ADR 0011): the kill came before that one commit, so
        # nothing of the call was written and nothing reached the rail. The agent, with no definite answer,
        # repeats the call; that admits it.
        conn = engine.ledger()
        assert conn.execute("SELECT COUNT(*) FROM intents WHERE subject_id = ?", (pid,)).fetchone()[0] == 0
        conn.close()
        engine.propose({"payment_id": pid, "amount": 45000})
    conn = engine.ledger()
    sik = wait_until(lambda: conn.execute("SELECT sik FROM intents WHERE subject_id = ?", (pid,)).fetchone(),
                     timeout=30, what="the intent to be admitted")[0]  # fmt: skip
    conn.close()
    intent = engine.settle(sik, {"APPLIED"}, timeout_s=45)
    assert engine.rail.count_stamped(sik) == 1, f"{point}: the rail must carry exactly one entity"
    assert intent.rail_entity_id is not None
    conn = engine.ledger()
    assert audit.verify_chain(conn) is None
    leftovers = conn.execute("SELECT COUNT(*) FROM intents WHERE state IN ('UNKNOWN', 'RECONCILING', 'IN_FLIGHT')")
    assert leftovers.fetchone()[0] == 0
    conn.close()
    # The agent's retry of the same call, with a fresh request id, is answered from the ledger.
    again = engine.outcome(engine.propose({"payment_id": pid, "amount": 45000}))
    assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, intent.rail_entity_id)
    assert engine.rail.count_stamped(sik) == 1
