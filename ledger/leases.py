"""The rail worker's singleton lease: a row with owner, epoch and heartbeat (SPEC §8).

A new owner may take the lease only when the holder's heartbeat is older than the TTL, and taking
it increments the epoch. Every IN_FLIGHT row carries the epoch it was written under, so writes by
a superseded owner are fenced out (see ledger.intents.transition's expect_epoch).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from interlock.errors import LeaseHeld, StaleLease
from ledger import audit
from ledger.db import require_transaction

RAIL_WORKER_LEASE = "rail_worker"


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    owner: str
    epoch: int
    heartbeat_at: int
    expires_at: int


def get_lease(conn: sqlite3.Connection, name: str) -> Lease | None:
    row = conn.execute("SELECT * FROM leases WHERE name = ?", (name,)).fetchone()
    return Lease(**dict(row)) if row else None


def acquire(conn: sqlite3.Connection, name: str, owner: str, *, now: int, ttl_ms: int) -> Lease:
    """Take the lease (epoch + 1) or raise LeaseHeld while another owner's heartbeat is fresh."""
    require_transaction(conn)
    current = get_lease(conn, name)
    if current is not None and current.owner != owner and current.expires_at > now:
        raise LeaseHeld(name, current.owner, current.expires_at - now)
    epoch = 1 if current is None else current.epoch + 1
    conn.execute(
        """INSERT INTO leases (name, owner, epoch, heartbeat_at, expires_at) VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,
               heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at""",
        (name, owner, epoch, now, now + ttl_ms),
    )
    previous = None if current is None else {"owner": current.owner, "epoch": current.epoch}
    audit.append(conn, "LEASE_ACQUIRED", {"name": name, "owner": owner, "epoch": epoch, "previous": previous}, now)
    return Lease(name, owner, epoch, now, now + ttl_ms)


def heartbeat(conn: sqlite3.Connection, lease: Lease, *, now: int, ttl_ms: int) -> Lease:
    """Extend the lease; StaleLease when someone else has taken it over (we must stop at once)."""
    require_transaction(conn)
    # An expired lease is not renewed: the reconciler may already have treated this worker's IN_FLIGHT
    # rows as abandoned, so a worker that slept through its expiry must stop, not carry on.
    cur = conn.execute(
        "UPDATE leases SET heartbeat_at = ?, expires_at = ? WHERE name = ? AND owner = ? AND epoch = ? "
        "AND expires_at > ?",
        (now, now + ttl_ms, lease.name, lease.owner, lease.epoch, now),
    )
    if cur.rowcount != 1:
        raise StaleLease(lease.name, f"lease epoch {lease.epoch} of {lease.owner} was superseded")
    return Lease(lease.name, lease.owner, lease.epoch, now, now + ttl_ms)


def assert_holder(conn: sqlite3.Connection, lease: Lease, *, now: int) -> Lease:
    """Fence: raise StaleLease unless *lease* is still the current epoch and has not expired at *now*.

    An expired lease is lost even before anyone takes it over: a successor may do so at any moment, and
    the reconciler already treats the holder's work as abandoned. Returns the lease as stored."""
    current = get_lease(conn, lease.name)
    if current is None or current.epoch != lease.epoch or current.owner != lease.owner:
        raise StaleLease(lease.name, f"lease epoch {lease.epoch} of {lease.owner} was superseded")
    if current.expires_at <= now:
        ago = now - current.expires_at
        raise StaleLease(lease.name, f"lease epoch {lease.epoch} of {lease.owner} expired {ago} ms ago")
    return current


def release(conn: sqlite3.Connection, lease: Lease, *, now: int) -> None:
    require_transaction(conn)
    conn.execute(
        "UPDATE leases SET expires_at = ? WHERE name = ? AND owner = ? AND epoch = ?",
        (now, lease.name, lease.owner, lease.epoch),
    )
