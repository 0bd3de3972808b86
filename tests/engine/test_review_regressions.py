"""Regressions for defects an independent review found in the money path (named after what broke)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sandbox.testing import HELD_MS
from tests.engine.conftest import Engine
from tests.mandates import write_mandate
from tests.procs import wait_until


def test_settlement_is_not_retried_while_a_slow_rail_may_still_apply_it(engine_factory: Callable[..., Engine]) -> None:
    # The client gives up at 1.5 s; the rail, holding the call until then, applies it half a second later. Looking
    # 1.0 s after the *start* would see nothing and retry a settlement that has no idempotency key: the wait counts
    # from giving up. Held, the call cannot be answered before the client gives up, however busy the machine.
    engine = engine_factory(env={"INTERLOCK_RECONCILE_MIN_DELAY_MS": "1000"})
    engine.rail.set_balance(1_000_000)
    before = len(engine.rail.entities("settlement"))
    engine.rail.set_faults([{"name": "slow", "rate": 1.0, "params": {"delay_ms": HELD_MS}}])
    try:
        outcome = engine.outcome(engine.propose({"amount": 25000}, tool="create_instant_settlement"))
        assert outcome.state == "UNKNOWN" and outcome.sik is not None
        engine.rail.clear_faults()
        gave_up = time.monotonic()
        wait_until(lambda: engine.rail.health()["slow_waiting"] == 1, timeout=60, what="the call held at the rail")
        # Half a second after the client gave up, on the clock: a reconciler looking as soon as it is told has looked.
        wait_until(lambda: time.monotonic() > gave_up + 0.5, timeout=60, what="half a second")
    finally:
        released = engine.rail.release_slow()
    assert released == 1, "the call was held at the rail until then"
    intent = engine.settle(outcome.sik, {"APPLIED"})
    assert intent.attempt_seq == 1
    assert len(engine.rail.entities("settlement")) == before + 1


def test_a_repeated_full_refund_is_the_same_refund(engine_factory: Callable[..., Engine]) -> None:
    engine = engine_factory()
    pid = engine.payment(70000)
    first = engine.outcome(engine.propose({"payment_id": pid}))
    assert (first.state, first.intent and first.intent.amount_minor) == ("APPLIED", 70000)
    # Nothing is refundable any more, yet the repeat of "refund it all" is that same refund.
    again = engine.outcome(engine.propose({"payment_id": pid}))
    assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, first.rail_entity_id)
    assert first.sik is not None and engine.rail.count_stamped(first.sik) == 1


def test_a_refund_blocked_by_a_window_is_not_blocked_forever(
    engine_factory: Callable[..., Engine], tmp_path: Path
) -> None:
    mandate = write_mandate(tmp_path / "mandate.yaml", {
        "limits.windows": [{"window_ms": 3000, "max_calls": 1}], "limits.fee_budgets": {},
    })  # fmt: skip
    engine = engine_factory(env={"INTERLOCK_MANDATE": str(mandate)})
    first = engine.outcome(engine.propose({"payment_id": engine.payment(), "amount": 1000}))
    assert first.state == "APPLIED"
    pid = engine.payment()
    blocked = engine.outcome(engine.propose({"payment_id": pid, "amount": 2000}))
    assert (blocked.state, blocked.reason_code) == ("BLOCKED", "G3_WINDOW_CALLS")
    assert blocked.sik is not None and engine.intent(blocked.sik) is None, "a refusal must not leave an intent"

    def goes_through() -> bool:
        return engine.outcome(engine.propose({"payment_id": pid, "amount": 2000})).state == "APPLIED"

    wait_until(goes_through, timeout=30, what="the same refund to pass once the window slid")
    assert engine.rail.count_stamped(blocked.sik) == 1
