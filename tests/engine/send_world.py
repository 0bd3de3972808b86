"""An in-process rail worker and reconciler over a real SQLite ledger, with a scripted rail and an injectable
wall clock: the pure-unit harness for the send-side fences (issue 13). Processes, Redis and HTTP are covered by
the engine and chaos tests; here every interleaving is placed exactly, with no sleeps."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from interlock.config import Settings, load_settings
from interlock.mandate import Mandate, MandateStore
from interlock.messages import Outcome
from ledger import intents, leases
from ledger.db import open_ledger, transaction
from ledger.intents import Intent
from ledger.states import Event
from rail_worker import execute as execute_module
from rail_worker import lease as lease_module
from rail_worker.runtime import RailRuntime
from rail_worker.writer import LedgerWriter
from rails.deadline import SendWindowClosed, check_send_window
from rails.models import Page, Refund, Settlement
from rails.razorpay import RailError, RailErrorKind
from reconciler import loop as reconciler_module
from reconciler.loop import Reconciler
from tests.mandates import AGENT, MERCHANT, make_mandate

T0 = 1_900_000_000_000
SETTLEMENT, REFUND = "create_instant_settlement", "create_refund"
_ids = itertools.count(1)


class Clock:
    """The wall clock every patched module reads; tests move it to stand for time passing (a pause, a wait), and
    the monotonic clock the reconciler measures its delay on moves with it. `step` moves the wall clock alone:
    NTP or a resumed VM setting it, with no time passing."""

    def __init__(self, ms: int) -> None:
        self._ms = ms
        self.mono_ms = 0

    def __call__(self) -> int:
        return self._ms

    @property
    def ms(self) -> int:
        return self._ms

    @ms.setter
    def ms(self, ms: int) -> None:
        self.mono_ms += max(ms - self._ms, 0)
        self._ms = ms

    def advance(self, ms: int) -> None:
        self.ms = self._ms + ms

    def step(self, ms: int) -> None:
        self._ms += ms

    def monotonic(self) -> float:
        return self.mono_ms / 1000


class NoRedis:
    """Reconcile hints are best effort (the sweep finds UNKNOWN rows); here they always fail. Published
    outcomes are kept in `published` (what the waiting ingress would have read)."""

    def __init__(self) -> None:
        self.published: list[Outcome] = []

    def rpush(self, *args: object) -> None:
        raise redis.RedisError("no redis in this unit test")

    def pipeline(self, transaction: bool = True) -> NoRedis:
        return self

    def lpush(self, key: str, value: str) -> None:
        self.published.append(Outcome.from_json(value))

    def expire(self, *args: object) -> None:
        return None

    def execute(self) -> None:
        return None


@dataclass
class ScriptedRail:
    """Records every money call. `during_call` runs while the request is out (before the rail applies it);
    `reject` is raised instead of an answer (after applying when `apply_then_fail`); `listed` is False while
    the rail's lists lag behind."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    entities: list[Any] = field(default_factory=list)
    during_call: Callable[[], None] | None = None
    hold: Callable[[], None] | None = None  # runs in every call while the rail has the request
    reject: RailError | None = None
    apply_then_fail: bool = False
    listed: bool = True

    def _money(self, notes: dict[str, Any] | None, make: Callable[[], Any]) -> Any:
        try:
            check_send_window()  # what the real client checks before it connects (and again at the first byte)
        except SendWindowClosed as exc:
            raise RailError(RailErrorKind.NOT_SENT, str(exc), method="POST", path="/scripted") from exc
        self.calls.append(dict(notes or {}))
        if self.hold is not None:
            self.hold()
        if self.during_call is not None:
            hook, self.during_call = self.during_call, None
            hook()
        if self.reject is not None and not self.apply_then_fail:
            raise self.reject
        entity = make()
        self.entities.append(entity)
        if self.reject is not None:
            raise self.reject  # applied, then the answer was lost (a gateway 504)
        return entity

    def create_instant_settlement(self, amount: int | None = None, *, settle_full_balance: bool = False,
                                  description: str | None = None, notes: dict[str, Any] | None = None) -> Settlement:
        return self._money(notes, lambda: Settlement.from_raw({
            "id": f"setlod_{next(_ids):014d}", "amount_requested": amount, "amount_settled": 0, "fees": 3, "tax": 1,
            "currency": "INR", "status": "created", "notes": notes or []}))  # fmt: skip

    def create_refund(self, payment_id: str, amount: int | None, *, speed: str | None = None,
                      notes: dict[str, Any] | None = None, receipt: str | None = None,
                      idempotency_key: str | None = None) -> Refund:  # fmt: skip
        return self._money(notes, lambda: Refund.from_raw({
            "id": f"rfnd_{next(_ids):014d}", "amount": amount, "currency": "INR", "payment_id": payment_id,
            "receipt": receipt, "notes": notes or [], "status": "processed"}))  # fmt: skip

    def _page(self, kind: type, count: int, skip: int) -> Page[Any]:
        items = [e for e in reversed(self.entities) if isinstance(e, kind)] if self.listed else []
        return Page[kind](items=items[skip: skip + count], requested_count=count, skip=skip)  # type: ignore[valid-type]

    def list_instant_settlements(self, *, count: int = 100, skip: int = 0) -> Page[Settlement]:
        return self._page(Settlement, count, skip)

    def list_refunds_for_payment(self, payment_id: str, *, count: int = 100, skip: int = 0) -> Page[Refund]:
        return self._page(Refund, count, skip)

    def stamped(self, sik: str) -> list[str]:
        return [e.id for e in self.entities if e.carries_stamp(sik)]


@dataclass
class World:
    settings: Settings
    clock: Clock
    rail: ScriptedRail
    mandate: Mandate
    path: Path
    group_commit: bool = False  # write through a LedgerWriter, as the rail worker process does
    writers: list[LedgerWriter] = field(default_factory=list)
    running: Reconciler | None = None

    def runtime(self, owner: str = "rail:A", *, take_lease: bool = True) -> RailRuntime:
        rt = RailRuntime(settings=self.settings, ledger_path=self.path, ledger=open_ledger(self.path),
                         mandates=MandateStore({AGENT: self.mandate}), rail=self.rail,  # type: ignore[arg-type]
                         redis=NoRedis(), owner=owner)  # type: ignore[arg-type]  # fmt: skip
        if take_lease:
            with transaction(rt.ledger):
                rt.lease = leases.acquire(rt.ledger, leases.RAIL_WORKER_LEASE, owner, now=self.clock(),
                                          ttl_ms=self.settings.lease_ttl_ms)  # fmt: skip
        if self.group_commit:
            rt.writer = LedgerWriter(rt.ledger).start()
            self.writers.append(rt.writer)
        return rt

    def close(self) -> None:
        for writer in self.writers:
            writer.stop()

    def reconciler(self, mandate: Mandate | None = None) -> Reconciler:
        """The world's one reconciler (it remembers what it has seen, as the running process does), judging
        retries against *mandate* (the world's unless given)."""
        if self.running is None:
            self.running = Reconciler(settings=self.settings, ledger=open_ledger(self.path), rail=self.rail,
                                      redis=None, owner="reconciler:1", monotonic=self.clock.monotonic)  # fmt: skip
        self.running.mandates = MandateStore({AGENT: mandate or self.mandate})
        return self.running

    def watch(self) -> None:
        """The running reconciler's sweep as an attempt is left unsettled: it starts counting the attempt's wait
        on its own clock from here (ADR 0023), as the process sweeping every second would."""
        self.reconciler()._due(self.clock())

    def authorized(self, tool: str = SETTLEMENT, *, sik: str = "S" * 32, amount: int = 50000) -> Intent:
        conn = open_ledger(self.path)
        subject = "balance" if tool == SETTLEMENT else "pay_SEND0000001"
        with transaction(conn):
            intents.insert_intent(
                conn, merchant_id=MERCHANT, sik=sik, tool=tool, subject_id=subject, amount_minor=amount,
                currency="INR", params={"amount": amount, "notes": {}}, params_hash="ph", agent_id=AGENT,
                mandate_id=self.mandate.mandate_id, mandate_hash=self.mandate.mandate_hash, operation_ref=None,
                distinct_reason=None, now=self.clock(),
            )  # fmt: skip
            return intents.transition(conn, MERCHANT, sik, Event.GATES_PASSED, now=self.clock())

    def intent(self, sik: str = "S" * 32) -> Intent:
        return intents.require_intent(open_ledger(self.path), MERCHANT, sik)

    def attempts_by_sik(self) -> list[tuple[str, str | None]]:
        rows = open_ledger(self.path).execute("SELECT sik, outcome FROM intent_attempts ORDER BY sik")
        return [(r[0], r[1]) for r in rows]

    def attempts(self, sik: str = "S" * 32) -> list[tuple[int, str | None]]:
        rows = open_ledger(self.path).execute(
            "SELECT attempt_seq, outcome FROM intent_attempts WHERE sik = ? ORDER BY attempt_seq", (sik,))
        return [(r[0], r[1]) for r in rows]


def make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, group_commit: bool = False,
               **timings: int) -> World:  # fmt: skip
    # One Clock for every actor here: the deployment is told its clocks agree (INTERLOCK_CLOCK_SKEW_MS 0) unless a
    # test says otherwise, so the bounds it places are the rules' own.
    settings = load_settings(ledger=tmp_path / "ledger.sqlite3", **{
        "rail_timeout_ms": 1000, "lease_ttl_ms": 3000, "reconcile_min_delay_ms": 500, "clock_skew_ms": 0,
        **timings})  # fmt: skip
    clock = Clock(T0)
    for module in (execute_module, lease_module, reconciler_module):
        monkeypatch.setattr(module, "now_ms", clock)
    mandate = make_mandate({"issued_at": T0 - 86_400_000, "expires_at": T0 + 30 * 86_400_000,
                            "limits.fee_budgets": {}, "approval.hold_above_minor": None})  # fmt: skip
    assert settings.ledger is not None
    return World(settings, clock, ScriptedRail(), mandate, settings.ledger, group_commit)


@pytest.fixture(params=[False, True], ids=["one-transaction-each", "group-commit"])
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[World]:
    """A world per commit mode: one transaction per write, and the rail worker's group commit."""
    made = make_world(tmp_path, monkeypatch, group_commit=request.param)
    yield made
    made.close()
