"""When an UNKNOWN intent is due for a reconcile pass (reconciler/loop.py `_due`), to the millisecond: not before
its call can no longer land on the rail (ADR 0005, 0010) plus reconcile.min_delay_ms — an unanswered attempt's
lease plus the call's deadline; an answered settlement's send plus the deadline; an answered REST refund (keyed:
the rail deduplicates) at once — and, after a pass, not before its backoff (500 ms doubling, capped at 30 s)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.db import open_ledger, transaction
from tests.engine.send_world import REFUND, SETTLEMENT, T0, World, make_world
from tests.mandates import MERCHANT
from tests.reconciler.recon_world import SIK, unknown

# make_world's timings: rail_timeout_ms 1000, lease_ttl_ms 3000, reconcile_min_delay_ms 500


def _due_from(world: World, at: int) -> bool:
    """True when the intent is due at *at* and was not due the millisecond before."""
    reconciler = world.reconciler()
    return (reconciler._due(at - 1), reconciler._due(at)) == ([], [(MERCHANT, SIK)])


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
