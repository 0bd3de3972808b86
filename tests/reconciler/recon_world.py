"""Shared set-up for the reconciler's behaviour tests: an intent placed in the state a test starts from, the
audit rows written after a mark, and a stand-in for Redis that records the reconciler's claims and the execute
jobs it hands to the rail worker (rq's queue is replaced by a recorder; nothing leaves the process)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from ledger import intents
from ledger.db import open_ledger, transaction
from ledger.states import Event
from reconciler import loop as reconciler_module
from tests.engine.send_world import SETTLEMENT, World
from tests.mandates import MERCHANT

SIK = "S" * 32
OWNER = "reconciler:1"


def audit_mark(world: World) -> int:
    row = open_ledger(world.path).execute("SELECT COALESCE(MAX(seq), 0) FROM audit_log").fetchone()
    return int(row[0])


def audit_since(world: World, mark: int) -> list[tuple[str, int, dict[str, Any]]]:
    """(kind, ts, payload) of every audit row after *mark*."""
    rows = open_ledger(world.path).execute(
        "SELECT kind, ts, payload_json FROM audit_log WHERE seq > ? ORDER BY seq", (mark,))
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def findings(world: World) -> list[tuple[Any, ...]]:
    rows = open_ledger(world.path).execute(
        """SELECT sik, attempt_seq, outcome, pages_scanned, pagination_exhausted, matched_entity_id, queried_at,
                  detail_json FROM recon_findings ORDER BY id""")
    return [(*tuple(r)[:7], json.loads(r[7])) for r in rows]


def transition_row(event: str, frm: str, to: str, *, sik: str = SIK, attempt_seq: int = 1,
                   sets: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """A TRANSITION payload; *sets* is what it says the transition set besides the state (ADR 0020)."""
    return {"merchant_id": MERCHANT, "sik": sik, "event": event, "from": frm, "to": to, "attempt_seq": attempt_seq,
            "set": sets or {}, **extra}  # fmt: skip


LEASE_TTL_MS = 3000  # make_world's lease_ttl_ms: a reconcile pass's per-intent lease runs this long


def reconcile_started(at: int, *, sik: str = SIK) -> tuple[str, int, dict[str, Any]]:
    """The audit row of a reconcile pass taking its per-intent lease at *at*."""
    return ("TRANSITION", at, transition_row("RECONCILE_STARTED", "UNKNOWN", "RECONCILING", sik=sik, actor=OWNER,
                                             sets={"lease_owner": OWNER, "lease_expires_at": at + LEASE_TTL_MS}))


def in_flight(world: World, conn: sqlite3.Connection, *, sik: str = SIK, tool: str = SETTLEMENT, epoch: int = 1,
              lease_expires_at: int | None = None) -> None:  # fmt: skip
    """AUTHORIZED, then IN_FLIGHT under rail:A's lease *epoch*, at the clock's now."""
    world.authorized(tool, sik=sik)
    lease = world.clock() + world.settings.lease_ttl_ms if lease_expires_at is None else lease_expires_at
    with transaction(conn):
        intents.start_attempt(conn, MERCHANT, sik, now=world.clock(), lease_owner="rail:A", lease_epoch=epoch,
                              lease_expires_at=lease, request={})  # fmt: skip


def unknown(world: World, conn: sqlite3.Connection, *, sik: str = SIK, tool: str = SETTLEMENT,
            finished_after: int | None = None, sent_after: int | None = None, http_status: int | None = None,
            reason_code: str | None = None, lease_expires_at: int | None = None) -> None:  # fmt: skip
    """One attempt started at the clock's now and left ambiguous: UNKNOWN. With *finished_after* its worker
    recorded an answer that many ms after the start (sent *sent_after* ms after it)."""
    in_flight(world, conn, sik=sik, tool=tool, lease_expires_at=lease_expires_at)
    started = world.clock()
    with transaction(conn):
        if finished_after is not None:
            intents.finish_attempt(conn, MERCHANT, sik, 1, now=started + finished_after, outcome="AMBIGUOUS",
                                   http_status=http_status,
                                   sent_at=None if sent_after is None else started + sent_after)  # fmt: skip
        intents.transition(conn, MERCHANT, sik, Event.RAIL_AMBIGUOUS, now=started,
                           set_fields={"reason_code": reason_code} if reason_code else None)  # fmt: skip


def stamped_settlement(world: World, sik: str = SIK) -> str:
    """A settlement on the rail carrying *sik*'s stamp (an earlier send that applied)."""
    entity = world.rail.create_instant_settlement(50000, notes={"interlock_sik": sik})
    world.rail.calls.clear()  # placed on the rail by the set-up, not sent by the code under test
    return str(entity.id)


class Clock:
    """A settable wall clock in ms for the in-process reconciler tests (`clock.ms += ...`)."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@dataclass
class Hub:
    """Redis as the reconciler uses it: SET NX PX claims (kept, honoured) and the rail queue (recorded)."""

    keys: dict[str, Any] = field(default_factory=dict)
    sets: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    jobs: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    down: bool = False  # every call raises RedisError

    def set(self, *args: Any, **kwargs: Any) -> bool | None:
        self.sets.append((args, kwargs))
        if self.down:
            raise redis.RedisError("connection refused")
        name, value = args
        if kwargs.get("nx") and name in self.keys:
            return None
        self.keys[name] = value
        return True

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        hub = self

        class Queue:
            def __init__(self, name: str, connection: Any) -> None:
                assert connection is hub, "the queue rides on the reconciler's Redis"
                self.name = name

            def enqueue(self, *args: Any, **kwargs: Any) -> None:
                if hub.down:
                    raise redis.RedisError("connection refused")
                hub.jobs.append((self.name, args, kwargs))

        monkeypatch.setattr(reconciler_module, "rq_queue", Queue)


def job(sik: str = SIK, queue: str = "rail") -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The execute job the rail worker is handed for *sik*."""
    return (queue, ("rail_worker.jobs.execute_intent", MERCHANT, sik, None), {"result_ttl": 600, "failure_ttl": 86400})
