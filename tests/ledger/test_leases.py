"""The singleton lease: a live holder keeps it, a stale one is taken over with epoch + 1 and fenced out."""

from __future__ import annotations

import sqlite3

import pytest

from interlock.errors import LeaseHeld, StaleLease
from interlock.verdicts import allow
from ledger import intents, leases
from ledger.db import transaction
from ledger.states import Event
from tests.ledger.helpers import put_intent

TTL = 1000


def take(conn: sqlite3.Connection, owner: str, now: int) -> leases.Lease:
    with transaction(conn):
        return leases.acquire(conn, leases.RAIL_WORKER_LEASE, owner, now=now, ttl_ms=TTL)


def test_second_owner_is_refused_while_the_heartbeat_is_fresh(ledger: sqlite3.Connection) -> None:
    first = take(ledger, "w1", 0)
    assert first.epoch == 1
    with pytest.raises(LeaseHeld, match="held by w1"):
        take(ledger, "w2", TTL - 1)
    with transaction(ledger):
        leases.heartbeat(ledger, first, now=TTL - 1, ttl_ms=TTL)
    with pytest.raises(LeaseHeld):
        take(ledger, "w2", TTL + 10)  # the heartbeat pushed expiry to 2*TTL - 1


def test_stale_lease_is_taken_over_with_the_next_epoch_and_the_old_owner_is_fenced(ledger: sqlite3.Connection) -> None:
    old = take(ledger, "w1", 0)
    new = take(ledger, "w2", TTL)
    assert (new.owner, new.epoch) == ("w2", 2)
    with pytest.raises(StaleLease), transaction(ledger):
        leases.heartbeat(ledger, old, now=TTL + 1, ttl_ms=TTL)
    with pytest.raises(StaleLease):
        leases.assert_holder(ledger, old, now=TTL + 2)
    leases.assert_holder(ledger, new, now=TTL + 2)


def _retry_in_flight(ledger: sqlite3.Connection, *, epoch: int) -> None:
    """Attempt 1 (epoch 1) went UNKNOWN and was confirmed not applied; attempt 2 is now IN_FLIGHT under *epoch*.
    RAIL_APPLIED is a legal edge from here: only the fence can refuse a write from attempt 1's worker."""
    put_intent(ledger, "S" * 32, "IN_FLIGHT", amount=100)  # attempt 1, started under epoch 1
    with transaction(ledger):
        intents.transition(ledger, "acc_DEMO000001", "S" * 32, Event.LEASE_EXPIRED, now=5)
        intents.begin_reconcile(ledger, "acc_DEMO000001", "S" * 32, now=6, owner="r", lease_expires_at=1006)
        intents.transition(ledger, "acc_DEMO000001", "S" * 32, Event.RECONCILE_CONFIRMED_ABSENT, now=7)
        intents.transition(ledger, "acc_DEMO000001", "S" * 32, Event.RETRY_AUTHORIZED, now=8,
                           reasserted=allow("REASSERTED"))  # fmt: skip
        intents.start_attempt(ledger, "acc_DEMO000001", "S" * 32, now=9, lease_owner="w2", lease_epoch=epoch,
                              lease_expires_at=1009, request={})  # fmt: skip


def test_an_outcome_written_under_a_superseded_epoch_is_refused(ledger: sqlite3.Connection) -> None:
    _retry_in_flight(ledger, epoch=2)  # the successor (epoch 2) runs attempt 2
    with pytest.raises(StaleLease, match="lease epoch is 2, writer holds 1"), transaction(ledger):
        # The superseded worker's writer holds epoch 1; the attempt fence is left out so that only the epoch refuses.
        intents.transition(ledger, "acc_DEMO000001", "S" * 32, Event.RAIL_APPLIED, now=10, expect_epoch=1)
    intent = intents.require_intent(ledger, "acc_DEMO000001", "S" * 32)
    assert (intent.state.value, intent.attempt_seq, intent.lease_epoch) == ("IN_FLIGHT", 2, 2)


def test_an_outcome_written_for_an_earlier_attempt_is_refused(ledger: sqlite3.Connection) -> None:
    _retry_in_flight(ledger, epoch=1)  # the same worker runs attempt 2; attempt 1's answer arrives late
    with pytest.raises(StaleLease, match="attempt_seq is 2, writer holds 1"), transaction(ledger):
        intents.transition(ledger, "acc_DEMO000001", "S" * 32, Event.RAIL_APPLIED, now=10, expect_epoch=1,
                           expect_attempt_seq=1)  # fmt: skip
    intent = intents.require_intent(ledger, "acc_DEMO000001", "S" * 32)
    assert (intent.state.value, intent.attempt_seq, intent.rail_entity_id) == ("IN_FLIGHT", 2, None)


def test_an_expired_lease_is_not_renewed_even_when_nobody_took_it(ledger: sqlite3.Connection) -> None:
    # A worker that slept through its expiry must stop: the reconciler may already have taken its rows.
    lease = take(ledger, "w1", 0)
    with pytest.raises(StaleLease), transaction(ledger):
        leases.heartbeat(ledger, lease, now=TTL, ttl_ms=TTL)
