"""The send-side rule (ADR 0005, issue 13): a request leaves only while both leases outlive it by the call's
deadline, an unfinished attempt is abandoned no earlier than its own lease plus that deadline, and evidence of
an applied attempt is never outvoted. One test per defect, named after what broke (repros in shared/repro)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from interlock.errors import OperatorRefused, StaleLease
from interlock.fees import DEFAULT_FEE_RATE
from interlock.messages import Decision, IntentTerms, Verdict
from ledger import intents, leases, operator
from ledger.db import open_ledger, transaction
from ledger.limits import reassert
from ledger.states import Event, State
from rail_worker import execute as execute_module
from rail_worker import lease as lease_module
from rail_worker.admit import admit
from rail_worker.classify import Classified
from rail_worker.dispatch import Dispatcher
from rail_worker.execute import execute
from rail_worker.runtime import RailRuntime
from rail_worker.writer import LedgerWriter
from rails.razorpay import RailError, RailErrorKind
from tests.engine import send_world
from tests.engine.send_world import REFUND, SETTLEMENT, World, make_world
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, MERCHANT, make_mandate

SIK = "S" * 32
world = send_world.world  # the fixture: one world per commit mode


def _attempt_out(world: World, conn: sqlite3.Connection) -> None:
    """Attempt 1 of SIK started by rail:A under epoch 1, with a 3 s row lease (inside the caller's transaction)."""
    intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                          lease_expires_at=world.clock() + 3000, request={})  # fmt: skip


def _confirmed_absent(world: World, conn: sqlite3.Connection) -> None:
    """Attempt 1 out, its answer ambiguous, then confirmed absent by a reconcile pass (inside the caller's
    transaction)."""
    _attempt_out(world, conn)
    intents.transition(conn, MERCHANT, SIK, Event.RAIL_AMBIGUOUS, now=world.clock())
    intents.begin_reconcile(conn, MERCHANT, SIK, now=world.clock(), owner="r", lease_expires_at=world.clock() + 1)
    intents.transition(conn, MERCHANT, SIK, Event.RECONCILE_CONFIRMED_ABSENT, now=world.clock())


def _retry_authorized(world: World, conn: sqlite3.Connection) -> None:
    """A retry authorized under the world's mandate, re-asserted as the reconciler does."""
    check = reassert(conn, intents.require_intent(conn, MERCHANT, SIK), world.mandate, now_ms=world.clock(),
                     rate=DEFAULT_FEE_RATE)  # fmt: skip
    intents.transition(conn, MERCHANT, SIK, Event.RETRY_AUTHORIZED, now=world.clock(), reasserted=check)


def _standby_takes_over(world: World, owner: str = "rail:B") -> object:
    standby = world.runtime(owner, take_lease=False)
    lease_module.boot(standby)
    return standby


# -- defect 1: a superseded attempt's APPLIED was forgotten, then sent again ----------------------------------------


def test_a_fenced_applied_answer_settles_the_intent_instead_of_a_second_settlement(world: World) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")

    def worker_a_looks_dead() -> None:
        # While A's request is out (the rail has not applied it yet) A stalls for 3 TTLs: B takes the lease and
        # the reconciler, paging a list that does not show the settlement yet, re-authorizes a retry.
        world.watch()
        world.clock.advance(3 * world.settings.lease_ttl_ms)
        _standby_takes_over(world)
        world.rail.listed = False
        world.reconciler().sweep()
        world.rail.listed = True
        assert world.intent().state is State.AUTHORIZED

    world.rail.during_call = worker_a_looks_dead
    execute(a, MERCHANT, SIK, request_id=None)  # A wakes up with the rail's APPLIED answer: fenced
    b = world.runtime("rail:B", take_lease=False)
    b.lease = leases.get_lease(b.ledger, leases.RAIL_WORKER_LEASE)
    execute(b, MERCHANT, SIK, request_id=None)  # the retry the reconciler enqueued
    assert len(world.rail.calls) == 1, "one settlement for one SIK"
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.stamped(SIK)[0])
    assert world.attempts() == [(1, "FENCED_APPLIED")]


def test_a_retry_consults_earlier_attempts_evidence_before_it_sends(world: World) -> None:
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):  # attempt 1 went UNKNOWN and was (wrongly) confirmed absent ...
        _confirmed_absent(world, conn)
        # ... its stamped answer is on its attempt row (kept by a superseded worker), and a retry is authorized.
        intents.finish_attempt(conn, MERCHANT, SIK, 1, now=world.clock(), outcome="FENCED_APPLIED",
                               rail_entity_id="setlod_EARLIER0000001")  # fmt: skip
        _retry_authorized(world, conn)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.rail.calls == [], "attempt 2 must not leave while attempt 1 is known to have applied"
    assert (world.intent().state, world.intent().rail_entity_id) == (State.APPLIED, "setlod_EARLIER0000001")


# -- defect 2: a standby's boot and the reconciler gave up on a row whose lease had not run out ----------------------


def test_a_standby_does_not_abandon_a_row_whose_own_lease_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world(tmp_path, monkeypatch, rail_timeout_ms=5000, lease_ttl_ms=30_000, reconcile_min_delay_ms=2000)
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    world.clock.advance(9_900)  # A commits IN_FLIGHT (renewing its lease) just before its next heartbeat
    seen: dict[str, object] = {}

    def stall_after_commit(name: str) -> None:
        if name != "rail.after_wal_before_call":
            return
        # A pauses just past its lease: B may take over, but A's row lease plus the call's deadline still runs.
        world.clock.advance(world.settings.lease_ttl_ms + 1)
        _standby_takes_over(world)
        world.clock.advance(500)
        world.reconciler().sweep()
        seen["state"] = world.intent().state

    monkeypatch.setattr("rail_worker.execute.failpoint", stall_after_commit)
    execute(a, MERCHANT, SIK, request_id=None)
    assert seen["state"] is State.IN_FLIGHT, "nobody may abandon the attempt before its row lease + deadline"
    assert world.rail.calls == [], "A woke past its worker lease: it must not send"
    assert world.attempts() == [(1, "NOT_SENT")]
    assert world.intent().state is State.UNKNOWN


def test_boot_takes_an_earlier_epochs_row_once_its_lease_and_deadline_are_over(world: World) -> None:
    world.authorized(SETTLEMENT)
    world.runtime("rail:A")  # epoch 1, the epoch the row below is written under
    conn = open_ledger(world.path)
    with transaction(conn):
        _attempt_out(world, conn)
    world.clock.advance(3000 + 1000 - 1)  # one ms before the row lease plus the call's deadline
    with transaction(conn):
        conn.execute("UPDATE leases SET expires_at = 0")  # the old worker's lease is long gone
    _standby_takes_over(world, "rail:B")
    assert world.intent().state is State.IN_FLIGHT
    world.clock.advance(1)
    with transaction(conn):
        conn.execute("UPDATE leases SET expires_at = 0")
    _standby_takes_over(world, "rail:C")
    assert world.intent().state is State.UNKNOWN


def test_an_unfinished_attempt_is_not_reconciled_before_its_lease_deadline_and_delay(world: World) -> None:
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _attempt_out(world, conn)
        intents.transition(conn, MERCHANT, SIK, Event.LEASE_EXPIRED, now=world.clock())
    rec = world.reconciler()
    world.watch()
    world.clock.mono_ms += 3_600_000  # watched for an hour: the wall-clock rule is the one placed here
    world.clock.advance(3000 + 1000 + 500 - 1)  # attempt lease + call deadline + min delay, less one ms
    assert rec._due(world.clock()) == []
    world.clock.advance(1)
    assert rec._due(world.clock()) == [(MERCHANT, SIK, 1)]


# -- defect 3: `now` read before the write lock; an expired lease accepted; `lost` never consulted -------------------


def test_a_lock_wait_past_the_lease_starts_no_attempt_and_sends_nothing(world: World) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    holder = open_ledger(world.path)
    holder.execute("BEGIN IMMEDIATE")  # someone holds the write lock ...
    release = threading.Timer(0.3, lambda: (world.clock.advance(4000), holder.execute("COMMIT")))
    release.start()  # ... for longer than A's lease: A's wait for the lock is a pause
    with pytest.raises(StaleLease):
        execute(a, MERCHANT, SIK, request_id=None)
    release.join()
    assert world.rail.calls == []
    assert world.intent().state is State.AUTHORIZED and world.attempts() == []


def test_an_expired_lease_fails_the_holder_check_even_when_nobody_took_it(world: World) -> None:
    a = world.runtime("rail:A")
    conn = open_ledger(world.path)
    assert a.lease is not None
    leases.assert_holder(conn, a.lease, now=world.clock())
    with pytest.raises(StaleLease, match="expired"):
        leases.assert_holder(conn, a.lease, now=a.lease.expires_at)


def test_a_lost_lease_stops_the_request_after_the_commit(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    monkeypatch.setattr("rail_worker.execute.failpoint",
                        lambda name: a.lease_lost.set() if name == "rail.after_wal_before_call" else None)
    execute(a, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    assert world.attempts() == [(1, "NOT_SENT")]


def test_a_request_leaves_only_while_both_leases_outlive_the_call_deadline(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    # A pause after the commit that leaves less than one call deadline on the row's lease: no send.
    monkeypatch.setattr("rail_worker.execute.failpoint", lambda name: world.clock.advance(
        world.settings.lease_ttl_ms - world.settings.rail_timeout_ms) if name == "rail.after_wal_before_call" else None)
    execute(a, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == [] and world.attempts() == [(1, "NOT_SENT")]


# -- defect 5: re-entering AUTHORIZED skipped G3 --------------------------------------------------------------------


def test_a_hold_released_after_its_window_filled_is_refused(tmp_path: Path) -> None:
    conn = open_ledger(tmp_path / "l.sqlite3")
    hour, now = 3_600_000, 1_900_000_000_000
    mandate = make_mandate({"limits.windows": [{"window_ms": hour, "max_calls": 2}], "limits.fee_budgets": {}})
    held = put_intent(conn, "H" * 32, "HELD", amount=1000, now=now - 3 * hour)
    put_intent(conn, "A" * 32, "APPLIED", amount=1000, now=now - 10_000)
    put_intent(conn, "B" * 32, "APPLIED", amount=1000, now=now - 5_000)
    with pytest.raises(OperatorRefused, match="G3_WINDOW_CALLS"), transaction(conn):
        operator.release_hold(conn, held, approver="ops", reason="ok", approved_terms={}, now=now, mandate=mandate)
    assert intents.require_intent(conn, MERCHANT, "H" * 32).state is State.HELD


def test_reauthorizing_without_a_reassertion_is_illegal(tmp_path: Path) -> None:
    from interlock.errors import IllegalTransition

    conn = open_ledger(tmp_path / "l.sqlite3")
    put_intent(conn, "H" * 32, "HELD", amount=1000)
    with pytest.raises(IllegalTransition, match="re-assertion"), transaction(conn):
        intents.transition(conn, MERCHANT, "H" * 32, Event.HOLD_RELEASED, now=5)


def test_a_retry_is_not_authorized_once_the_window_is_full(world: World) -> None:
    full = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                         "limits.windows": [{"window_ms": 3_600_000, "max_calls": 1}], "limits.fee_budgets": {},
                         "approval.hold_above_minor": None})  # fmt: skip
    world.mandate = full
    world.authorized(SETTLEMENT)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    world.rail.reject = None
    world.rail.entities.clear()  # the 504 did not apply
    put_intent(open_ledger(world.path), "T" * 32, "APPLIED", amount=100, now=world.clock() + 1,
               tool=SETTLEMENT, subject="balance")  # another call filled the window meanwhile
    world.watch()
    world.clock.advance(5000)
    world.reconciler(full).sweep()
    assert world.intent().state is State.CONFIRMED_NOT_APPLIED, "the retry must not pass G3's window"


# -- defect 6: a definitive 4xx on a retry was trusted as FAILED_TERMINAL --------------------------------------------


def _retry_after_a_false_absent(world: World) -> None:
    world.authorized(REFUND)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    world.rail.apply_then_fail = True
    a = world.runtime()
    execute(a, MERCHANT, SIK, request_id=None)  # attempt 1: the rail applied it, but answered 504
    world.rail.apply_then_fail = False
    world.rail.listed = False  # the list lags: the reconciler wrongly confirms absence
    world.watch()
    world.clock.advance(5000)
    world.reconciler().sweep()
    assert world.intent().state is State.AUTHORIZED
    world.rail.reject = RailError(RailErrorKind.REJECTED, "400 fully refunded", method="POST", path="/x",
                                  http_status=400, code="BAD_REQUEST_ERROR",
                                  description="The payment has been fully refunded already")  # fmt: skip
    execute(world.runtime("rail:B"), MERCHANT, SIK, request_id=None)  # attempt 2, by the worker holding the lease now


def test_a_rejected_retry_is_reconciled_by_stamp_before_any_terminal_state(world: World) -> None:
    _retry_after_a_false_absent(world)
    assert world.intent().state is State.UNKNOWN, "a 4xx on attempt 2 may describe attempt 1's apply"
    world.rail.listed = True
    world.watch()
    world.clock.advance(5000)
    world.reconciler().sweep()
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.entities[0].id)


def test_a_rejected_retry_with_the_stamp_confirmed_absent_is_terminal(world: World) -> None:
    _retry_after_a_false_absent(world)
    world.rail.entities.clear()  # this time nothing of ours is on the rail
    world.rail.listed = True
    world.watch()
    world.clock.advance(5000)
    world.reconciler().sweep()
    intent = world.intent()
    assert (intent.state, intent.reason_code) == (State.FAILED_TERMINAL, "RAIL_REJECTED")


# -- item 9: a replaced or expired mandate stops an AUTHORIZED intent before it sends ----------------------------------


def test_a_replaced_mandate_withdraws_an_authorized_intent_without_sending(world: World) -> None:
    world.authorized(SETTLEMENT)
    rt = world.runtime()
    replaced = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                             "purpose": "a different mandate"})  # fmt: skip
    rt.mandates = type(rt.mandates)({AGENT: replaced})
    execute(rt, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    intent = world.intent()
    assert (intent.state, intent.reason_code) == (State.CONFIRMED_NOT_APPLIED, "G1_MANDATE_CHANGED")


def test_an_expired_mandate_blocks_an_authorized_intent_without_sending(world: World) -> None:
    world.authorized(SETTLEMENT)
    rt = world.runtime()
    world.clock.ms = world.mandate.expires_at
    with transaction(rt.ledger):  # keep the worker's own lease alive at the new time
        rt.lease = leases.acquire(rt.ledger, leases.RAIL_WORKER_LEASE, rt.owner, now=world.clock(), ttl_ms=3000)
    execute(rt, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    assert (world.intent().state, world.intent().reason_code) == (State.BLOCKED, "G1_MANDATE_EXPIRED")


# -- items 9 and 10: admission is fenced by the lease; a refused call does not burn its operation_ref ------------------


def _decision(world: World, sik: str, *, verdict: str = "ALLOW", amount: int = 50000,
              operation_ref: str | None = None) -> Decision:  # fmt: skip
    terms = IntentTerms(merchant_id=MERCHANT, tool=SETTLEMENT, subject="balance", amount_minor=amount, currency="INR")
    return Decision(
        request_id=f"req-{sik[:4]}-{verdict}", agent_id=AGENT, merchant_id=MERCHANT, tool=SETTLEMENT, sik=sik,
        terms=terms, params={"amount": amount, "notes": {}}, params_hash="ph", verdict=Verdict(verdict),
        reason_code="ALLOWED" if verdict == "ALLOW" else "G2_ABOVE_MAX", results=[],
        mandate_id=world.mandate.mandate_id, mandate_hash=world.mandate.mandate_hash, operation_ref=operation_ref,
        window=1, decided_at_ms=world.clock(),
    )  # fmt: skip


def test_a_refused_call_does_not_burn_its_operation_ref(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rail_worker.admit.now_ms", world.clock)
    rt = world.runtime()
    refused = admit(rt, _decision(world, "R" * 32, verdict="BLOCK", operation_ref="ticket_42"))
    assert refused.outcome is not None and refused.outcome.state == "BLOCKED"
    admitted = admit(rt, _decision(world, "Q" * 32, operation_ref="ticket_42"))
    assert admitted.execute is not None, "the ref was never bound to the refused call's SIK"
    conflict = admit(rt, _decision(world, "P" * 32, operation_ref="ticket_42"))
    assert conflict.outcome is not None and conflict.outcome.reason_code == "KEY_CONFLICT"


def test_an_expired_rail_worker_lease_admits_nothing(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rail_worker.admit.now_ms", world.clock)
    rt = world.runtime()
    world.clock.advance(world.settings.lease_ttl_ms)
    with pytest.raises(StaleLease):
        admit(rt, _decision(world, "Q" * 32))
    assert open_ledger(world.path).execute("SELECT COUNT(*) FROM intents").fetchone()[0] == 0


# -- with many calls in flight (issue 14): the rule holds per call ----------------------------------------------------


def test_after_the_lease_is_lost_no_queued_call_leaves(world: World) -> None:
    siks = [f"{i:032d}" for i in range(32)]
    for sik in siks:
        world.authorized(SETTLEMENT, sik=sik, amount=1000 + int(sik))
    rt = world.runtime()
    if rt.writer is None:
        rt.writer = LedgerWriter(rt.ledger).start()
        world.writers.append(rt.writer)
    out, release = threading.Semaphore(0), threading.Event()

    def hold_the_call() -> None:
        out.release()
        release.wait(10)

    world.rail.hold = hold_the_call
    dispatcher = Dispatcher(rt, 16)
    feeder = threading.Thread(target=lambda: [dispatcher.execute(MERCHANT, s, None) for s in siks])
    feeder.start()
    for _ in range(16):
        assert out.acquire(timeout=10), "16 calls should be out at once"
    assert not out.acquire(timeout=0.2), "a 17th call left while 16 slots were taken"
    rt.lease_lost.set()  # the heartbeat found the lease gone
    release.set()
    feeder.join(10)
    dispatcher.drain()
    assert len(world.rail.calls) == 16, "no request may leave after the lease is lost"
    outcomes = dict(world.attempts_by_sik())
    assert sorted(outcomes.values()).count("NOT_SENT") == 16
    assert sorted(outcomes.values()).count("APPLIED") == 16


def test_an_outcome_write_that_fails_is_retried_not_dropped(world: World) -> None:
    # The rail applied the settlement; recording it first fails (another writer holds the lock past the busy
    # timeout). The stamped answer is the only first-hand evidence: it must be written, not left to a list read.
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    a.ledger.execute("PRAGMA busy_timeout = 100")
    other = open_ledger(world.path)

    def someone_holds_the_write_lock() -> None:
        other.execute("BEGIN IMMEDIATE")
        threading.Timer(0.5, lambda: other.execute("COMMIT")).start()

    world.rail.during_call = someone_holds_the_write_lock
    execute(a, MERCHANT, SIK, request_id=None)
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.stamped(SIK)[0])
    assert world.attempts() == [(1, "APPLIED")]


def test_a_settlement_sent_late_in_its_window_is_read_no_earlier_than_its_own_deadline(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pause longer than one deadline between the IN_FLIGHT commit and the send, then a quick gateway 504: the
    # rail may apply the settlement until the request's own deadline, counted from when it left, not committed.
    s = world.settings
    world.authorized(SETTLEMENT)
    pause = s.lease_ttl_ms - s.rail_timeout_ms - 500
    monkeypatch.setattr("rail_worker.execute.failpoint", lambda name: world.clock.advance(pause)
                        if name == "rail.after_wal_before_call" else None)  # fmt: skip
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    sent = world.clock() + pause
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.rail.calls, "the request left inside its window"
    rec = world.reconciler()
    world.watch()
    world.clock.mono_ms += 3_600_000  # watched for an hour: the wall-clock rule is the one placed here
    earliest = sent + s.rail_timeout_ms + s.reconcile_min_delay_ms
    assert rec._due(earliest - 1) == []
    assert rec._due(earliest) == [(MERCHANT, SIK, 1)]


def test_a_wall_clock_step_after_the_send_check_still_closes_the_window(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wall clock steps forward (NTP, a resumed VM) between the worker's check and the first byte; the
    # monotonic clock does not move. The standby and the reconciler judge on the wall clock, so the
    # request must not leave either.
    world.authorized(SETTLEMENT)
    a = world.runtime("rail:A")
    real_window = execute_module.send_window

    @contextmanager
    def window_then_step(send_by: float, **limits: Any) -> Iterator[None]:
        with real_window(send_by, **limits):
            s = world.settings
            world.clock.advance(2 * s.lease_ttl_ms + s.rail_timeout_ms + s.reconcile_min_delay_ms + 1)
            yield

    monkeypatch.setattr(execute_module, "send_window", window_then_step)
    execute(a, MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    assert world.attempts() == [(1, "NOT_SENT")]


def test_an_expired_mandate_withdraws_a_retry_so_late_evidence_can_still_settle_it(world: World) -> None:
    world.mandate = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.clock() + 120_000,
                                  "limits.fee_budgets": {}, "approval.hold_above_minor": None})  # fmt: skip
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _confirmed_absent(world, conn)
        _retry_authorized(world, conn)
    world.clock.ms = world.mandate.expires_at
    execute(world.runtime(), MERCHANT, SIK, request_id=None)
    assert world.rail.calls == []
    # ADR 0026: the earlier attempt is reconciled again, and with no retry to follow its absence is final.
    assert (world.intent().state, world.intent().reason_code) == (State.UNKNOWN, "G1_MANDATE_EXPIRED")
    world.watch()
    world.clock.advance(30_000)
    world.reconciler().sweep()
    assert world.intent().state is State.CONFIRMED_NOT_APPLIED and world.rail.calls == []


def test_a_withdrawn_retry_of_a_keyed_refund_is_settled_by_the_list_that_shows_it_late(world: World) -> None:
    # Found by the simulator (seed 1175): a keyed refund applied with its answer lost; the reconciler read its list
    # early (its retry would carry the same key), found nothing and authorized a retry; the mandate was replaced and
    # the retry withdrawn. The intent was left CONFIRMED_NOT_APPLIED for a refund the customer had received.
    world.authorized(REFUND, amount=189900)
    world.rail.reject = RailError(RailErrorKind.AMBIGUOUS, "504", method="POST", path="/x", http_status=504)
    world.rail.apply_then_fail = True
    execute(world.runtime(), MERCHANT, SIK, request_id=None)  # applied, then the answer was lost
    world.rail.reject, world.rail.listed = None, False  # the refund list lags behind
    world.watch()
    world.clock.advance(5000)
    world.reconciler().sweep()
    assert world.intent().state is State.AUTHORIZED  # the early read found nothing: a retry, keyed like the first
    replaced = make_mandate({"issued_at": world.mandate.issued_at, "expires_at": world.mandate.expires_at,
                             "purpose": "replaced"})  # fmt: skip
    rt = world.runtime()
    rt.mandates = type(rt.mandates)({AGENT: replaced})
    execute(rt, MERCHANT, SIK, request_id=None)
    assert len(world.rail.calls) == 1, "the withdrawn retry was sent"
    assert world.intent().state is State.UNKNOWN
    reconciler = world.reconciler(replaced)  # restarted under the new mandate: no retry will follow now
    world.clock.advance(5000)
    reconciler.sweep()
    assert world.intent().state is State.UNKNOWN, "one early read without a retry to prove it was taken as absence"
    world.rail.listed = True
    world.clock.advance(5000)
    reconciler.sweep()
    intent = world.intent()
    assert (intent.state, intent.rail_entity_id) == (State.APPLIED, world.rail.stamped(SIK)[0])


def test_a_refusal_caused_only_by_money_applied_since_the_gates_read_asks_for_a_repeat(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rail_worker.admit.now_ms", world.clock)
    read_at = world.clock()
    put_intent(open_ledger(world.path), "A" * 32, "APPLIED", amount=6000, subject="balance", tool=SETTLEMENT,
               now=read_at + 5)  # applied just after the gate read a balance of 10,000: it may not show in it
    rt = world.runtime()
    decision = _decision(world, "Q" * 32, amount=5000).model_copy(
        update={"rail_basis_minor": 10_000, "rail_read_at_ms": read_at})
    admission = admit(rt, decision)
    assert admission.outcome is not None
    assert (admission.outcome.state, admission.outcome.reason_code, admission.outcome.caller_action) == (
        "BLOCKED", "G2_STALE_RAIL_READ", "RETRY_SAME_CALL")
    over = admit(rt, _decision(world, "P" * 32, amount=11_000).model_copy(
        update={"request_id": "over", "rail_basis_minor": 10_000, "rail_read_at_ms": read_at}))
    assert over.outcome is not None and (over.outcome.reason_code, over.outcome.caller_action) == (
        "G2_EXCEEDS_BALANCE", "DO_NOT_RETRY")


def test_a_refused_repeat_does_not_bind_its_operation_ref(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rail_worker.admit.now_ms", world.clock)
    rt = world.runtime()
    first = admit(rt, _decision(world, "Q" * 32))
    assert first.execute is not None
    refused = admit(rt, _decision(world, "Q" * 32, verdict="BLOCK", operation_ref="ticket_7").model_copy(
        update={"request_id": "again"}))
    assert refused.outcome is not None and refused.outcome.replayed
    assert intents.sik_for_operation_ref(open_ledger(world.path), MERCHANT, "ticket_7") is None


def _dispatcher_with_a_held_call(world: World, monkeypatch: pytest.MonkeyPatch,
                                 ) -> tuple[RailRuntime, Dispatcher, threading.Event, threading.Event]:  # fmt: skip
    """A dispatcher of 4 call slots over a group-commit writer; the rail holds each money call (*out* set when it
    arrives) until *release* is set."""
    monkeypatch.setattr("rail_worker.admit.now_ms", world.clock)
    rt = world.runtime()
    if rt.writer is None:
        rt.writer = LedgerWriter(rt.ledger).start()
        world.writers.append(rt.writer)
    out, release = threading.Event(), threading.Event()
    world.rail.hold = lambda: (out.set(), release.wait(10))  # type: ignore[func-returns-value]
    return rt, Dispatcher(rt, 4), out, release


def test_a_repeat_of_a_call_still_in_flight_is_answered_with_its_recorded_outcome(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two identical calls race: the first is out at the rail when the second is admitted. The second is told
    # what the first recorded (APPLIED, replayed), not IN_FLIGHT, which would only send the agent round again.
    rt, dispatcher, out, release = _dispatcher_with_a_held_call(world, monkeypatch)
    assert dispatcher.handle_decision(_decision(world, "Q" * 32)) == "DISPATCHED"
    assert out.wait(10)
    repeat = _decision(world, "Q" * 32).model_copy(update={"request_id": "the-repeat"})
    dispatcher.handle_decision(repeat)  # admitted on a pool thread
    waiting = lambda: any(o.request_id == "the-repeat" for claim in list(dispatcher._calls.values())  # noqa: E731
                          for o in claim.waiting)  # fmt: skip
    deadline = time.monotonic() + 10
    while not waiting() and time.monotonic() < deadline:
        time.sleep(0.005)
    published = rt.redis.published  # type: ignore[attr-defined]
    assert waiting() and [o.request_id for o in published] == [], "the repeat waits for the call's record"
    release.set()
    dispatcher.drain()
    answers = {o.request_id: (o.state, o.replayed) for o in published}
    assert answers == {"req-QQQQ-ALLOW": ("APPLIED", False), "the-repeat": ("APPLIED", True)}
    assert len(world.rail.calls) == 1


def test_a_repeat_admitted_just_before_the_call_is_recorded_gets_the_recorded_answer(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race: the repeat's admission reads IN_FLIGHT, then the call is recorded and lets go of the intent
    # before the repeat can wait on it. The repeat must read again, not publish the IN_FLIGHT it read.
    rt, dispatcher, out, release = _dispatcher_with_a_held_call(world, monkeypatch)
    real_after = dispatcher._after_admission

    def late(key: Any, **how: Any) -> bool:
        if how.get("wait_with") is not None:
            release.set()  # the call comes back now, between the repeat's read and its wait
            deadline = time.monotonic() + 10
            while any(c.executing for c in list(dispatcher._calls.values())) and time.monotonic() < deadline:
                time.sleep(0.005)
        return real_after(key, **how)

    monkeypatch.setattr(dispatcher, "_after_admission", late)
    assert dispatcher.handle_decision(_decision(world, "R" * 32)) == "DISPATCHED"
    assert out.wait(10)
    dispatcher.handle_decision(_decision(world, "R" * 32).model_copy(update={"request_id": "the-late-repeat"}))
    dispatcher.drain()
    answers = {o.request_id: (o.state, o.replayed) for o in rt.redis.published}  # type: ignore[attr-defined]
    assert answers["the-late-repeat"] == ("APPLIED", True)
    assert len(world.rail.calls) == 1


def test_a_second_stamped_entity_is_put_on_the_audit_chain(world: World) -> None:
    # Must not happen under the send-side rule; if a rail breach ever makes it happen, a person must see it.
    world.authorized(SETTLEMENT)
    conn = open_ledger(world.path)
    with transaction(conn):
        _confirmed_absent(world, conn)
        _retry_authorized(world, conn)
        second = intents.start_attempt(conn, MERCHANT, SIK, now=world.clock(), lease_owner="rail:A", lease_epoch=1,
                                       lease_expires_at=world.clock() + 3000, request={})  # fmt: skip
        intents.finish_attempt(conn, MERCHANT, SIK, 1, now=world.clock(), outcome="FENCED_APPLIED",
                               rail_entity_id="setlod_FIRST00000001")  # fmt: skip
    rt = world.runtime()
    applied = Classified(Event.RAIL_APPLIED, "APPLIED", rail_entity_id="setlod_SECOND0000001", http_status=200)
    rt.write(lambda c: execute_module.record(rt, c, second, applied, lease_epoch=1))
    kinds = [r[0] for r in open_ledger(world.path).execute("SELECT kind FROM audit_log ORDER BY seq")]
    assert kinds.count("DUPLICATE_ENTITIES") == 1
