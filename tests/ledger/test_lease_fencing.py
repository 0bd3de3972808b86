"""The rail worker's singleton lease at its boundaries: who may take it and at which ms, the epoch each taking
writes, what a heartbeat extends and when it is refused, what the holder fence returns or says, and release."""

from __future__ import annotations

import json
import sqlite3

import pytest

from interlock.errors import LeaseHeld, LedgerError, StaleLease
from ledger import audit, leases
from ledger.db import transaction
from ledger.leases import Lease

NAME = leases.RAIL_WORKER_LEASE
TTL = 1000


def take(conn: sqlite3.Connection, owner: str, now: int, name: str = NAME) -> Lease:
    with transaction(conn):
        return leases.acquire(conn, name, owner, now=now, ttl_ms=TTL)


def beat(conn: sqlite3.Connection, lease: Lease, now: int) -> Lease:
    with transaction(conn):
        return leases.heartbeat(conn, lease, now=now, ttl_ms=TTL)


def lease_records(conn: sqlite3.Connection) -> list[tuple[int, str, dict[str, object]]]:
    rows = conn.execute("SELECT ts, kind, payload_json FROM audit_log ORDER BY seq")
    return [(r["ts"], r["kind"], json.loads(r["payload_json"])) for r in rows]


def test_the_first_owner_takes_epoch_one_and_the_taking_is_audited(ledger: sqlite3.Connection) -> None:
    assert leases.get_lease(ledger, NAME) is None
    lease = take(ledger, "w1", 100)
    assert lease == Lease(NAME, "w1", 1, 100, 100 + TTL)
    assert leases.get_lease(ledger, NAME) == lease
    assert lease_records(ledger) == [(100, "LEASE_ACQUIRED", {"name": NAME, "owner": "w1", "epoch": 1,
                                                              "previous": None})]  # fmt: skip


def test_a_live_holder_keeps_the_lease_until_its_expiry_ms(ledger: sqlite3.Connection) -> None:
    take(ledger, "w1", 100)
    with pytest.raises(LeaseHeld) as info:
        take(ledger, "w2", 100 + TTL - 1)
    assert (info.value.name, info.value.owner) == (NAME, "w1")
    assert str(info.value) == (f"lease {NAME!r} is held by w1 (heartbeat fresh; expires in 1 ms); refusing to start")
    assert leases.get_lease(ledger, NAME) == Lease(NAME, "w1", 1, 100, 100 + TTL)
    assert audit.count(ledger) == 1


def test_at_its_expiry_ms_the_lease_is_taken_over_with_the_next_epoch(ledger: sqlite3.Connection) -> None:
    take(ledger, "w1", 100)
    successor = take(ledger, "w2", 100 + TTL)
    assert successor == Lease(NAME, "w2", 2, 100 + TTL, 100 + 2 * TTL)
    assert leases.get_lease(ledger, NAME) == successor
    assert lease_records(ledger)[-1] == (100 + TTL, "LEASE_ACQUIRED", {
        "name": NAME, "owner": "w2", "epoch": 2, "previous": {"owner": "w1", "epoch": 1}})


def test_the_same_owner_taking_it_again_moves_to_the_next_epoch(ledger: sqlite3.Connection) -> None:
    take(ledger, "w1", 100)
    assert take(ledger, "w1", 200) == Lease(NAME, "w1", 2, 200, 200 + TTL)  # a restarted worker fences its past self


def test_leases_of_different_names_are_independent(ledger: sqlite3.Connection) -> None:
    rail = take(ledger, "w1", 100)
    other = take(ledger, "w2", 100, name="other")
    assert other == Lease("other", "w2", 1, 100, 100 + TTL)
    assert beat(ledger, rail, 500) == Lease(NAME, "w1", 1, 500, 500 + TTL)
    assert leases.get_lease(ledger, "other") == other


def test_a_heartbeat_extends_the_lease_from_now(ledger: sqlite3.Connection) -> None:
    lease = take(ledger, "w1", 100)
    renewed = beat(ledger, lease, 100 + TTL - 1)
    assert renewed == Lease(NAME, "w1", 1, 100 + TTL - 1, 100 + 2 * TTL - 1)
    assert leases.get_lease(ledger, NAME) == renewed
    assert audit.count(ledger) == 1  # heartbeats are not audited


def test_a_heartbeat_at_the_expiry_ms_is_refused(ledger: sqlite3.Connection) -> None:
    lease = take(ledger, "w1", 100)
    with pytest.raises(StaleLease) as info:
        beat(ledger, lease, 100 + TTL)
    assert info.value.sik == NAME
    assert leases.get_lease(ledger, NAME) == lease


def test_a_superseded_holder_cannot_heartbeat(ledger: sqlite3.Connection) -> None:
    old = take(ledger, "w1", 100)
    new = take(ledger, "w2", 100 + TTL)
    with pytest.raises(StaleLease) as info:
        beat(ledger, old, 100 + TTL + 1)
    assert (info.value.sik, str(info.value)) == (
        NAME, f"stale write refused for intent {NAME}: lease epoch 1 of w1 was superseded")
    impostor = Lease(NAME, "w1", 2, 100 + TTL, 100 + 2 * TTL)  # the right epoch, the wrong owner
    with pytest.raises(StaleLease, match="lease epoch 2 of w1 was superseded"):
        beat(ledger, impostor, 100 + TTL + 1)
    assert leases.get_lease(ledger, NAME) == new


def test_the_holder_fence_returns_the_stored_lease(ledger: sqlite3.Connection) -> None:
    lease = take(ledger, "w1", 100)
    beat(ledger, lease, 600)
    assert leases.assert_holder(ledger, lease, now=600 + TTL - 1) == Lease(NAME, "w1", 1, 600, 600 + TTL)


def test_the_holder_fence_refuses_a_superseded_or_foreign_lease(ledger: sqlite3.Connection) -> None:
    with pytest.raises(StaleLease) as info:
        leases.assert_holder(ledger, Lease(NAME, "w1", 1, 0, TTL), now=1)  # nobody ever took it
    assert str(info.value) == f"stale write refused for intent {NAME}: lease epoch 1 of w1 was superseded"
    old = take(ledger, "w1", 100)
    take(ledger, "w2", 100 + TTL)
    with pytest.raises(StaleLease) as info:
        leases.assert_holder(ledger, old, now=100 + TTL + 1)
    assert (info.value.sik, str(info.value)) == (
        NAME, f"stale write refused for intent {NAME}: lease epoch 1 of w1 was superseded")
    with pytest.raises(StaleLease, match="lease epoch 2 of w1 was superseded"):
        leases.assert_holder(ledger, Lease(NAME, "w1", 2, 100 + TTL, 100 + 2 * TTL), now=100 + TTL + 1)


def test_the_holder_fence_refuses_an_expired_lease_and_says_since_when(ledger: sqlite3.Connection) -> None:
    lease = take(ledger, "w1", 100)
    for now, ago in ((100 + TTL, 0), (100 + TTL + 25, 25)):
        with pytest.raises(StaleLease) as info:
            leases.assert_holder(ledger, lease, now=now)
        assert (info.value.sik, str(info.value)) == (
            NAME, f"stale write refused for intent {NAME}: lease epoch 1 of w1 expired {ago} ms ago")


def test_a_released_lease_can_be_taken_at_once(ledger: sqlite3.Connection) -> None:
    lease = take(ledger, "w1", 100)
    with transaction(ledger):
        leases.release(ledger, lease, now=300)
    assert leases.get_lease(ledger, NAME) == Lease(NAME, "w1", 1, 100, 300)
    assert take(ledger, "w2", 300) == Lease(NAME, "w2", 2, 300, 300 + TTL)


def test_a_superseded_holder_releasing_does_not_release_its_successor(ledger: sqlite3.Connection) -> None:
    old = take(ledger, "w1", 100)
    new = take(ledger, "w2", 100 + TTL)
    other = take(ledger, "w1", 100, name="other")
    with transaction(ledger):
        leases.release(ledger, old, now=100 + TTL + 1)
        leases.release(ledger, Lease(NAME, "w1", 2, 0, 0), now=100 + TTL + 1)  # the successor's epoch, not its owner
        leases.release(ledger, Lease(NAME, "w2", 1, 0, 0), now=100 + TTL + 1)  # its owner, not its epoch
    assert leases.get_lease(ledger, NAME) == new
    assert leases.get_lease(ledger, "other") == other


@pytest.mark.parametrize("write", [
    lambda c, lease: leases.acquire(c, NAME, "w2", now=5000, ttl_ms=TTL),
    lambda c, lease: leases.heartbeat(c, lease, now=200, ttl_ms=TTL),
    lambda c, lease: leases.release(c, lease, now=200),
])  # fmt: skip
def test_lease_writes_outside_a_transaction_are_refused(ledger: sqlite3.Connection, write: object) -> None:
    lease = take(ledger, "w1", 100)
    with pytest.raises(LedgerError, match="must run inside transaction"):
        write(ledger, lease)  # type: ignore[operator]
    assert leases.get_lease(ledger, NAME) == lease
