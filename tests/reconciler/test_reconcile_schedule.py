"""When an UNKNOWN intent is due for a reconcile pass (reconciler/loop.py `_due`), to the millisecond: not before
its call can no longer land on the rail (ADR 0005, 0010) plus reconcile.min_delay_ms — an unanswered attempt's
lease plus the call's deadline; an answered settlement's send plus the deadline; an answered REST refund (keyed:
the rail deduplicates) at once — and, after a pass, not before its backoff (500 ms doubling, capped at 30 s)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import Event
from tests.engine.send_world import REFUND, SETTLEMENT, T0, World, make_world
from tests.mandates import MERCHANT
from tests.reconciler.recon_world import SIK, in_flight, unknown

# make_world's timings: rail_timeout_ms 1000, lease_ttl_ms 3000, reconcile_min_delay_ms 500


def _due_from(world: World, at: int) -> bool:
    """True when the intent is due at *at* on the wall clock and was not due the millisecond before, for a
    reconciler that has watched it for longer than any wait (the monotonic half of the rule is tested below)."""
    reconciler = world.reconciler()
    reconciler._due(world.clock())
    world.clock.mono_ms += 3_600_000
    return (reconciler._due(at - 1), reconciler._due(at)) == ([], [(MERCHANT, SIK, 1)])


def test_an_unanswered_attempt_is_due_after_its_own_lease_the_call_deadline_and_the_min_delay(
        world: World, conn: sqlite3.Connection) -> None:  # fmt: skip
    unknown(world, conn, lease_expires_at=T0 + 2000)
    assert _due_from(world, T0 + 3500)


def test_an_unanswered_attempt_with_no_lease_recorded_counts_the_ttl_from_its_start(
        world: World, conn: sqlite3.Connection) -> None:  # fmt: skip
    unknown(world, conn, lease_expires_at=T0 + 2000)
    with transaction(conn):  # an attempt row from before the column existed
        conn.execute("UPDATE intent_attempts SET lease_expires_at = NULL")
    assert _due_from(world, T0 + 4500)


@pytest.mark.parametrize(("sent_after", "finished_after", "due_after"), [
    (None, 300, 1500),  # an answer, no send time recorded: the deadline from the start
    (200, 300, 1700),  # the deadline from when the request left
    (100, 5000, 5500),  # an answer later than the deadline: from the answer
])  # fmt: skip
def test_an_answered_settlement_is_due_once_the_call_could_no_longer_apply(
        world: World, conn: sqlite3.Connection, sent_after: int | None, finished_after: int, due_after: int) -> None:
    unknown(world, conn, finished_after=finished_after, sent_after=sent_after, http_status=504)
    assert _due_from(world, T0 + due_after)


def test_an_answered_rest_refund_is_due_at_once_the_rail_deduplicates_its_key(world: World,
                                                                             conn: sqlite3.Connection) -> None:
    unknown(world, conn, tool=REFUND, finished_after=300, sent_after=100, http_status=502)
    assert _due_from(world, T0 + 800)


def test_a_rest_refund_the_rail_said_is_still_running_waits_out_the_call_deadline(world: World,
                                                                                 conn: sqlite3.Connection) -> None:
    unknown(world, conn, tool=REFUND, finished_after=300, sent_after=100, http_status=409)
    assert _due_from(world, T0 + 1600)


def test_a_refund_through_an_upstream_mcp_server_waits_like_a_settlement(world: World,
                                                                         conn: sqlite3.Connection) -> None:
    world.settings = world.settings.model_copy(update={"rail": "mcp-upstream"})
    unknown(world, conn, tool=REFUND, finished_after=300, sent_after=100, http_status=502)
    assert _due_from(world, T0 + 1600)


@pytest.mark.parametrize("tool", [SETTLEMENT, REFUND])
def test_an_attempt_started_at_the_epoch_is_timed_from_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            tool: str) -> None:  # fmt: skip
    world = make_world(tmp_path, monkeypatch)
    world.clock.ms = 0
    conn = open_ledger(world.path)
    unknown(world, conn, tool=tool, finished_after=0, http_status=409)
    assert _due_from(world, 1500)


def test_an_unanswered_attempt_started_at_the_epoch_with_no_lease_recorded(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    world = make_world(tmp_path, monkeypatch)
    world.clock.ms = 0
    conn = open_ledger(world.path)
    unknown(world, conn)
    with transaction(conn):
        conn.execute("UPDATE intent_attempts SET lease_expires_at = NULL")
    assert _due_from(world, 4500)


@pytest.mark.parametrize(("passes", "backoff"), [(1, 500), (2, 1000), (3, 2000), (7, 30_000), (8, 30_000)])
def test_after_a_pass_the_next_waits_out_a_doubling_backoff_from_the_last_update(
        world: World, conn: sqlite3.Connection, passes: int, backoff: int) -> None:  # fmt: skip
    unknown(world, conn, finished_after=100, http_status=504)  # its call could land until T0 + 1 s
    with transaction(conn):  # as left by `passes` inconclusive passes, the last at T0 + 10 s
        conn.execute("UPDATE intents SET reconcile_attempts = ?, updated_at = ?", (passes, T0 + 10_000))
    assert _due_from(world, T0 + 10_000 + backoff)


# -- the same wait on the reconciler's own monotonic clock (finding F1 of the simulator, ADR 0023) ---------------------


def _due_now(world: World) -> bool:
    return world.reconciler()._due(world.clock()) == [(MERCHANT, SIK, world.intent().attempt_seq)]


def test_a_forward_step_of_the_wall_clock_does_not_make_an_answered_settlement_due(world: World,
                                                                                   conn: sqlite3.Connection) -> None:
    unknown(world, conn, finished_after=0, http_status=504)  # answered at once; due at T0 + 1.5 s by the wall
    assert not _due_now(world), "seen now, for the first time"
    world.clock.step(60_000)  # NTP sets the clock a minute on; no time has passed
    assert not _due_now(world), "the rail may still apply it, and its list may not show it yet"
    world.clock.advance(1499)
    assert not _due_now(world)
    world.clock.advance(1)  # the deadline and the min delay have passed since it was first seen
    assert _due_now(world)


def test_an_answered_refund_the_rail_deduplicates_waits_only_the_min_delay_since_it_was_seen(
        world: World, conn: sqlite3.Connection) -> None:  # fmt: skip
    unknown(world, conn, tool=REFUND, finished_after=0, http_status=502)
    assert not _due_now(world)
    world.clock.step(60_000)
    world.clock.advance(499)
    assert not _due_now(world)
    world.clock.advance(1)
    assert _due_now(world)


def test_an_attempt_seen_in_flight_counts_its_wait_from_then(world: World, conn: sqlite3.Connection) -> None:
    in_flight(world, conn)
    assert not _due_now(world), "IN_FLIGHT is watched, never due"
    world.clock.advance(4000)
    with transaction(conn):  # its worker died: given up without an answer
        intents.transition(conn, MERCHANT, SIK, Event.LEASE_EXPIRED, now=world.clock())
    world.clock.step(60_000)
    world.clock.advance(499)
    assert not _due_now(world), "a lease, a deadline and the min delay: 4.5 s since it was first seen"
    world.clock.advance(1)
    assert _due_now(world)


def test_a_reconciler_that_starts_late_watches_for_the_whole_wait_itself(world: World,
                                                                        conn: sqlite3.Connection) -> None:
    unknown(world, conn)  # no answer recorded, long ago on the wall clock
    world.clock.step(3_600_000)
    assert not _due_now(world), "it cannot know how long the attempt has been out"
    world.clock.advance(4499)
    assert not _due_now(world)
    world.clock.advance(1)
    assert _due_now(world)


def test_a_new_attempt_is_watched_afresh(world: World, conn: sqlite3.Connection) -> None:
    unknown(world, conn, finished_after=0, http_status=504)
    world.reconciler()._due(world.clock())
    world.clock.advance(10_000)
    with transaction(conn):  # attempt 1 confirmed absent and retried; attempt 2 answered 504 now
        conn.execute("UPDATE intents SET attempt_seq = 2")
        conn.execute("UPDATE intent_attempts SET attempt_seq = 2")
    assert not _due_now(world)
    world.clock.advance(1500)
    assert _due_now(world)


def test_an_open_attempt_written_with_a_longer_ttl_than_ours_is_waited_for_with_it(world: World,
                                                                                  conn: sqlite3.Connection) -> None:
    unknown(world, conn, lease_expires_at=T0 + 9000)  # its worker ran with a 9 s TTL; ours is 3 s
    world.clock.step(3_600_000)
    assert not _due_now(world)
    world.clock.advance(9000 + 1000 + 500 - 1)
    assert not _due_now(world)
    world.clock.advance(1)
    assert _due_now(world)
