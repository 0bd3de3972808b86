"""A shard restored from a replica that lags the lost primary never pays twice (ADR 0029; ops/restore.py).

Real processes and the sandbox rail over HTTP. The "replica" is a consistent copy of the ledger taken with SQLite's
online backup at one instant — what a Litestream restore gives is exactly such a prefix of the commits; the tail
after it is lost with the machine. In that tail a refund was applied on the rail and the agent was told so; the agent
repeats its call on the restored shard. Without the restore protocol the ledger has never heard of it and would
pay again; with it, the repeat lands on the refund the rail re-read recovered.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.redis_server import EmbeddedRedis
from interlock import clock
from interlock.clock import now_ms
from interlock.mandate_load import load_mandate
from ledger import audit, intents, leases
from ledger import restore as marks
from ledger.db import open_ledger, transaction
from ledger.states import State
from ops import restore
from rails.razorpay import RailError, RazorpayClient
from sandbox.testing import HELD_MS, SandboxProcess
from tests.engine.conftest import FAST, Engine
from tests.ledger.helpers import put_intent
from tests.mandates import AGENT, EXAMPLE, MERCHANT, make_mandate
from tests.procs import wait_until

FAST_DEADLINE_S = int(FAST["INTERLOCK_RAIL_TIMEOUT_MS"]) / 1000
FAST_DELAY_S = int(FAST["INTERLOCK_RECONCILE_MIN_DELAY_MS"]) / 1000
NO_WAIT = {"deadline_s": 0.0, "reread_after_s": 0.0}  # a scripted rail, whose lists never lag


def _backup(source: Path, out: Path) -> None:
    """A consistent copy of the ledger at this instant, as a replica that stopped here would restore."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src, dst = sqlite3.connect(f"file:{source}?mode=ro", uri=True), sqlite3.connect(out)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _stamped(rail: SandboxProcess, sik: str) -> list[dict]:
    return [e for e in rail.entities("refund") if (e["entity"].get("notes") or {}).get("interlock_sik") == sik]


def test_a_refund_paid_in_the_lost_tail_is_recovered_and_its_repeat_lands_on_it(engine_factory, tmp_path: Path,
                                                                                rail_sandbox: SandboxProcess) -> None:
    first_machine = engine_factory()
    payment = first_machine.payment()
    before = first_machine.outcome(first_machine.propose({"payment_id": payment, "amount": 10_000}))
    assert before.state == "APPLIED", before
    # The replica stops here (the engine after this is the lost tail); the new machine's ledger path gets the copy.
    new_ledger = tmp_path / "stack1" / "ledger.sqlite3"
    _backup(first_machine.stack.ledger_path, new_ledger)
    lost = first_machine.outcome(first_machine.propose({"payment_id": payment, "amount": 20_000}))
    assert lost.state == "APPLIED" and lost.sik is not None, lost
    first_machine.stack.stop()  # the machine is gone

    conn = open_ledger(new_ledger)
    try:
        assert intents.get_intent(conn, MERCHANT, lost.sik) is None  # the replica never heard of it
        env = rail_sandbox.rail_env()
        with RazorpayClient(env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"],
                            env["INTERLOCK_RAIL_KEY_SECRET"]) as rail:  # fmt: skip
            restore.begin(conn, now=now_ms, actor="test-restore", margin_ms=0)
            report = restore.run(conn, rail, [load_mandate(EXAMPLE)], now=now_ms, actor="test-restore",
                                 deadline_s=FAST_DEADLINE_S, reread_after_s=FAST_DELAY_S)  # fmt: skip
        ours = [r for r in report.recovered if r["sik"] == lost.sik]
        assert [(r["rail_entity_id"], r["amount_minor"], r["subject"]) for r in ours] == [
            (lost.rail_entity_id, 20_000, payment)]  # fmt: skip
        assert before.sik not in {r["sik"] for r in report.recovered}  # known and APPLIED: left as it is
        recovered = intents.require_intent(conn, MERCHANT, lost.sik)
        assert (recovered.state, recovered.rail_entity_id) == (State.APPLIED, lost.rail_entity_id)
        assert marks.pending(conn) is None and audit.verify_chain(conn) is None
    finally:
        conn.close()

    # The restored ledger still holds the lost machine's lease, as the replica saw it: it runs out on its own.
    conn = open_ledger(new_ledger, readonly=True)
    try:
        lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
    finally:
        conn.close()
    assert lease is not None
    wait_until(lambda: now_ms() > lease.expires_at, timeout=30, what="the lost machine's lease to run out")
    second_machine: Engine = engine_factory()  # its data directory holds the restored ledger
    assert second_machine.stack.ledger_path == new_ledger
    again = second_machine.outcome(second_machine.propose({"payment_id": payment, "amount": 20_000}))
    assert (again.state, again.replayed, again.rail_entity_id) == ("APPLIED", True, lost.rail_entity_id), again
    [entity] = _stamped(rail_sandbox, lost.sik)
    assert (entity["entity"]["notes"]["interlock_merchant"], entity["entity"]["notes"]["interlock_agent"]) == (
        MERCHANT, AGENT)  # fmt: skip


def test_a_settlement_in_flight_when_the_machine_is_lost_lands_after_the_first_read_and_is_paid_once(
    engine_factory, tmp_path: Path, rail_sandbox: SandboxProcess,
) -> None:
    """The lost machine's last instant settlement is on its way when the machine is lost (the rail holds it until the
    restore's first read is done, then applies it: inside the deadline, however busy the machine); the restore
    starts at once. Its first read cannot see it; its final read, a deadline plus the delay after its start, must,
    so that the agent's repeat lands on it. Instant settlements carry no idempotency key: read too early, the repeat
    was a second settlement (../shared/repro/restore_reads_before_lost_send_lands.py)."""
    tool, amount = "create_instant_settlement", 50_000
    rail_sandbox.set_balance(10_000_000)
    first_machine = engine_factory()
    warm = first_machine.outcome(first_machine.propose({"amount": 12_300}, tool=tool))
    assert warm.state == "APPLIED", warm
    new_ledger = tmp_path / "stack1" / "ledger.sqlite3"
    _backup(first_machine.stack.ledger_path, new_ledger)  # the replica stops here
    rail_sandbox.set_faults([{"name": "slow", "rate": 1.0, "params": {"delay_ms": HELD_MS}}])  # until released
    first_machine.propose({"amount": amount}, tool=tool)

    def in_flight() -> str | None:
        conn = open_ledger(first_machine.stack.ledger_path, readonly=True)
        try:
            row = conn.execute("SELECT sik FROM intents WHERE tool = ? AND amount_minor = ? AND state = 'IN_FLIGHT'",
                               (tool, amount)).fetchone()  # fmt: skip
        finally:
            conn.close()
        return None if row is None else str(row["sik"])

    lost_sik = wait_until(in_flight, timeout=60, what="the settlement IN_FLIGHT on the first machine")
    wait_until(lambda: rail_sandbox.health()["slow_waiting"] == 1, timeout=60, what="the request at the rail")
    first_machine.stack.kill_all()  # the machine is lost (and so fenced) with the request out
    rail_sandbox.clear_faults()
    first_read_done: list[float] = []

    def sleep_after_letting_the_rail_apply(seconds: float) -> None:
        # The restore waits between its reads: the first of those waits is where the held call lands.
        if not first_read_done:
            first_read_done.append(seconds)
            assert rail_sandbox.count_stamped(lost_sik) == 0, "held: the first read could not have seen it"
            rail_sandbox.release_slow()
            wait_until(lambda: rail_sandbox.count_stamped(lost_sik) == 1, timeout=60, what="the held call to land")
        clock.sleep(seconds)

    conn = open_ledger(new_ledger)
    try:
        env = rail_sandbox.rail_env()
        with RazorpayClient(env["INTERLOCK_RAIL_URL"], env["INTERLOCK_RAIL_KEY_ID"],
                            env["INTERLOCK_RAIL_KEY_SECRET"]) as rail:  # fmt: skip
            restore.begin(conn, now=now_ms, actor="test-restore")
            report = restore.run(conn, rail, [load_mandate(EXAMPLE)], now=now_ms, actor="test-restore",
                                 deadline_s=FAST_DEADLINE_S, reread_after_s=FAST_DELAY_S,
                                 sleep=sleep_after_letting_the_rail_apply)  # fmt: skip
        assert first_read_done, "the restore read the rail again without waiting"
        assert report.final_read_after_ms >= (FAST_DEADLINE_S + FAST_DELAY_S) * 1000
        assert lost_sik in {r["sik"] for r in report.recovered}, report.summary()  # the rail is shared: others too
        lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
    finally:
        conn.close()
        rail_sandbox.release_slow()  # nothing stays held for the module's next test
    assert lease is not None
    wait_until(lambda: now_ms() > lease.expires_at, timeout=30, what="the lost machine's lease to run out")
    second_machine: Engine = engine_factory()
    again = second_machine.outcome(second_machine.propose({"amount": amount}, tool=tool))
    assert (again.state, again.replayed, again.sik) == ("APPLIED", True, lost_sik), again
    stamped = [e for e in rail_sandbox.entities("settlement")
               if (e["entity"].get("notes") or {}).get("interlock_sik") == lost_sik]  # fmt: skip
    assert [e["entity"]["id"] for e in stamped] == [again.rail_entity_id]


def test_a_restore_turns_what_was_in_motion_unknown_and_settles_what_the_tail_sent(tmp_path: Path) -> None:
    """Pure ledger and a rail's lists as data: nothing is executed from a replica's AUTHORIZED or IN_FLIGHT; a held
    call the tail released and sent is settled by the rail's entity; a refused one on other terms goes to a person;
    a stamped entity no mandate of the shard can own stops the restore, and the ledger stays refused."""
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    authorized = put_intent(conn, "A" * 32, "AUTHORIZED", amount=5_000, subject="pay_RESTOREA0001", now=1_000)
    in_flight = put_intent(conn, "F" * 32, "IN_FLIGHT", amount=5_500, subject="pay_RESTOREF0001", now=1_000)
    held = put_intent(conn, "H" * 32, "HELD", amount=6_000, subject="pay_RESTOREH0001", now=1_000)
    other = put_intent(conn, "O" * 32, "FAILED_TERMINAL", amount=7_000, subject="pay_RESTOREO0001", now=1_000)
    rail = _Lists([
        _refund("rfnd_H", held.sik, "pay_RESTOREH0001", 6_000),
        _refund("rfnd_O", other.sik, "pay_RESTOREO0001", 9_999),  # our stamp on other terms
        _refund("rfnd_X", "", "pay_SOMEONEELSE1", 1_000),  # not ours
    ])
    with pytest.raises(restore.RestoreRefused, match="no unfinished restore"):
        restore.run(conn, rail, [], now=lambda: 2_000, actor="test", **NO_WAIT)  # never on a ledger not marked restored
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    slept: list[float] = []
    report = restore.run(conn, rail, [], now=lambda: 2_000, actor="test", deadline_s=0, reread_after_s=1.5,
                         sleep=slept.append, monotonic=lambda: 0.0)  # fmt: skip
    # Read twice, the reconciler's delay apart, and the refunds once more a delay later: what a read found before is
    # not counted again.
    assert slept == [1.5, 3.0] and report.entities_read == 9
    assert report.made_unknown == 2 and report.recovered == []
    assert len(report.settled) == 1 and len(report.quarantined) == 1
    states = {i.sik: intents.require_intent(conn, MERCHANT, i.sik).state for i in (authorized, in_flight, held, other)}
    assert states == {authorized.sik: State.UNKNOWN, in_flight.sik: State.UNKNOWN, held.sik: State.APPLIED,
                      other.sik: State.QUARANTINED}  # fmt: skip
    assert marks.pending(conn) is None
    # A second restore of this ledger finds a stamped entity it does not know and no mandate that grants refunds.
    restore.begin(conn, now=lambda: 3_000, actor="test", margin_ms=10_000)
    with pytest.raises(restore.RestoreRefused, match="cannot be told whose it is"):
        restore.run(conn, _Lists([_refund("rfnd_N", "N" * 32, "pay_RESTOREN0001", 1_000)]), [], now=lambda: 3_000,
                    actor="test", **NO_WAIT)  # fmt: skip
    assert marks.pending(conn) is not None  # the rail worker stays refused
    assert audit.verify_chain(conn) is None
    conn.close()


@pytest.mark.parametrize(("state", "amount", "ends"), [
    ("CONFIRMED_NOT_APPLIED", 4_000, State.APPLIED),  # the tail reopened it and sent it: RECOVERED_FROM_RAIL
    ("FAILED_TERMINAL", 4_000, State.APPLIED),  # a repeat the tail admitted and sent: RECOVERED_FROM_RAIL
    ("HELD", 4_001, State.QUARANTINED),  # released and sent by the tail, applied on other terms: QUARANTINE
])  # fmt: skip
def test_a_moved_on_intent_the_lost_tail_sent_is_settled_by_the_rail_s_entity(tmp_path: Path, state: str, amount: int,
                                                                              ends: State) -> None:  # fmt: skip
    """Three edges the 10,000 seeds never take (docs/simulation.md, "The edges the long run does not take"): the
    replica shows an intent not applied, refused or held, and the lost tail moved it on and sent it. The rail's
    entity with its stamp settles it — APPLIED on its terms, a person's on other terms — before the shard serves."""
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    moved_on = put_intent(conn, "M" * 32, state, amount=4_000, subject="pay_RESTOREM0001", now=1_000)
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    report = restore.run(conn, _Lists([_refund("rfnd_M", moved_on.sik, "pay_RESTOREM0001", amount)]), [],
                         now=lambda: 2_000, actor="test", **NO_WAIT)  # fmt: skip
    after = intents.require_intent(conn, MERCHANT, moved_on.sik)
    assert after.state is ends
    if ends is State.APPLIED:
        assert after.rail_entity_id == "rfnd_M" and [s["was"] for s in report.settled] == [state]
    else:
        assert [q["was"] for q in report.quarantined] == [state] and report.settled == []
    conn.close()


@pytest.mark.parametrize("actor", [["rail-worker"], ["reconciler"]])
def test_no_actor_writes_a_ledger_whose_restore_has_not_finished(actor: list[str], tmp_path: Path,
                                                                 redis_server: EmbeddedRedis,
                                                                 rail_sandbox: SandboxProcess) -> None:  # fmt: skip
    """Neither the rail worker (which would send) nor the reconciler (which would settle, expire holds) starts on it."""
    ledger = tmp_path / "ledger.sqlite3"
    conn = open_ledger(ledger)
    with transaction(conn):
        audit.append(conn, marks.STARTED, {"last_seq": 0, "last_commit_ms": 0, "window_from_ms": 0}, 1)
    conn.close()
    done = subprocess.run([sys.executable, "-m", "interlock.cli", *actor], capture_output=True, text=True,
                          timeout=60, env={"INTERLOCK_LEDGER": str(ledger), "REDIS_URL": redis_server.url,
                                           "PATH": "/usr/bin:/bin", "INTERLOCK_MANDATE": str(EXAMPLE),
                                           **rail_sandbox.rail_env()})  # fmt: skip
    assert done.returncode != 0
    assert "restore has not finished" in done.stderr + done.stdout, done.stderr[-2000:]


class _Lists:
    def __init__(self, refunds: list[dict]) -> None:
        from rails.models import Refund

        self.refunds = [Refund.from_raw(r) for r in refunds]

    def list_refunds(self, *, count: int = 100, skip: int = 0):  # noqa: ANN201 - a Page[Refund]
        from rails.models import Page

        return Page(items=self.refunds[skip:skip + count], requested_count=count, skip=skip)

    def list_instant_settlements(self, *, count: int = 100, skip: int = 0):  # noqa: ANN201
        from rails.models import Page

        return Page(items=[], requested_count=count, skip=skip)

    def list_payouts(self, account_number: str, *, reference_id=None, status=None, count: int = 100,  # noqa: ANN001
                     skip: int = 0):  # noqa: ANN201
        from rails.models import Page

        return Page(items=[], requested_count=count, skip=skip)


def _refund(entity_id: str, sik: str, payment_id: str, amount: int, owner: tuple[str, str] | None = None) -> dict:
    notes = {"interlock_sik": sik} if sik else {}
    if owner is not None:
        notes.update(interlock_merchant=owner[0], interlock_agent=owner[1])
    return {"id": entity_id, "entity": "refund", "payment_id": payment_id, "amount": amount, "currency": "INR",
            "notes": notes, "status": "processed", "created_at": 2}  # fmt: skip


class _Landing(_Lists):
    """A rail on which a refund sent by the lost machine just before it was fenced lands at *lands_at* (seconds on
    the restore's monotonic clock), and is listed from then on; the restore's sleep moves that clock."""

    def __init__(self, refund: dict, lands_at: float) -> None:
        super().__init__([])
        self.later, self.lands_at, self.t, self.reads_at = _Lists([refund]).refunds, lands_at, 100.0, []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def list_refunds(self, *, count: int = 100, skip: int = 0):  # noqa: ANN201
        from rails.models import Page

        self.reads_at.append(self.t)
        listed = self.later if self.t >= self.lands_at else []
        return Page(items=listed[skip:skip + count], requested_count=count, skip=skip)


def test_the_final_read_waits_for_a_call_the_lost_machine_sent_just_before_it_was_fenced(tmp_path: Path) -> None:
    """The restore's final read of the rail (the one after which the shard serves) is no earlier than its start — the
    old machine is fenced by then, so nothing of it leaves later — plus the call deadline plus the reconcile delay: a
    settlement or refund sent just before lands up to its deadline later and is listed within the delay after that.
    Read only the delay apart (as before), the restore finished without it, and the agent's repeat paid again
    (../shared/repro/restore_reads_before_lost_send_lands.py)."""
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    # Sent at the fence (t=100), applied 9.9 s later, listed 1.9 s after that: inside the 10 s + 2 s bound.
    rail = _Landing(_refund("rfnd_LATE", "L" * 32, "pay_RESTOREL0001", 4_000, (MERCHANT, AGENT)), 100 + 9.9 + 1.9)
    report = restore.run(conn, rail, [load_mandate(EXAMPLE)], now=lambda: 2_000, actor="test", deadline_s=10,
                         reread_after_s=2, sleep=rail.sleep, monotonic=rail.monotonic)  # fmt: skip
    assert rail.reads_at == [100.0, 112.0, 114.0] and report.final_read_after_ms == 14_000
    assert [r["rail_entity_id"] for r in report.recovered] == ["rfnd_LATE"]
    assert intents.require_intent(conn, MERCHANT, "L" * 32).state is State.APPLIED
    [finished] = [json.loads(r[0]) for r in conn.execute(
        "SELECT payload_json FROM audit_log WHERE kind = ?", (marks.FINISHED,))]  # fmt: skip
    assert finished["final_read_after_ms"] == 14_000  # the chain says how long the restore waited
    conn.close()


def test_a_refund_the_rail_lists_a_delay_late_is_still_read_before_the_shard_serves(tmp_path: Path) -> None:
    """Finding F-loss-2 (docs/simulation.md; the machine-loss simulation, seed 95 of focus machine_loss): a refund on
    the wire when the machine was lost landed after its caller's deadline and was listed later than ADR 0010's bound,
    by less than the delay (refunds may be, ADR 0026). Both reads missed it; the restored shard served, and the
    agent's repeat, with the same SIK, was refused G2_EXCEEDS_REFUNDABLE against the payment the lost refund had
    refunded: DO_NOT_RETRY for money that moved, and a stamped refund the ledger never knew. Refunds are read once
    more, a delay after the final read."""
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    # Sent at the fence (t=100): listed 1.9 s past the deadline plus the delay (10 s + 2 s).
    rail = _Landing(_refund("rfnd_LATE", "L" * 32, "pay_RESTOREL0001", 4_000, (MERCHANT, AGENT)), 100 + 12 + 1.9)
    report = restore.run(conn, rail, [load_mandate(EXAMPLE)], now=lambda: 2_000, actor="test", deadline_s=10,
                         reread_after_s=2, sleep=rail.sleep, monotonic=rail.monotonic)  # fmt: skip
    assert rail.reads_at[-1] == 114.0
    assert [r["rail_entity_id"] for r in report.recovered] == ["rfnd_LATE"]
    conn.close()


class _PayoutLanding(_Landing):
    """As _Landing, for a payout sent by the lost machine: listed in its account from *lands_at* on."""

    def __init__(self, payout: dict, lands_at: float) -> None:
        from rails.models import Payout

        super().__init__(_refund("rfnd_EARLY", "E" * 32, "pay_RESTOREE0001", 1_000, (MERCHANT, AGENT)), 0)
        self.payout, self.payout_reads_at = Payout.from_raw(payout), []

    def list_payouts(self, account_number: str, *, reference_id=None, status=None, count: int = 100,  # noqa: ANN001
                     skip: int = 0):  # noqa: ANN201
        from rails.models import Page

        self.payout_reads_at.append(self.t)
        listed = [self.payout] if self.t >= self.lands_at else []
        return Page(items=listed[skip:skip + count], requested_count=count, skip=skip)


def test_a_payout_the_rail_lists_a_delay_late_is_still_read_before_the_shard_serves(tmp_path: Path) -> None:
    """Finding F-loss-4 (docs/simulation.md; seeds 7979 and 9346 of `make simulate`): a payout on the wire when the
    machine was lost landed after its caller's deadline and was listed past ADR 0010's bound by less than the delay,
    as refunds may be. Both reads of the payout account missed it; the restored shard served without it, and the
    agent's "pay again by UPI" to the same contact — another fund account, another SIK, another idempotency key, which
    G2 lands on the first payout only if the ledger knows it — paid the vendor twice. Payouts are read a third time
    with the refunds."""
    mandate = make_mandate()
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    payout = {"id": "pout_LATE", "entity": "payout", "fund_account_id": "fa_DEMOVENDOR0001", "amount": 7_000,
              "currency": "INR", "status": "processing", "reference_id": "ilk_" + "P" * 32,
              "notes": {"interlock_sik": "P" * 32, "interlock_merchant": MERCHANT, "interlock_agent": AGENT},
              "created_at": 2}  # fmt: skip
    rail = _PayoutLanding(payout, 100 + 12 + 1.9)
    report = restore.run(conn, rail, [mandate], now=lambda: 2_000, actor="test", deadline_s=10, reread_after_s=2,
                         sleep=rail.sleep, monotonic=rail.monotonic)  # fmt: skip
    assert rail.payout_reads_at == [100.0, 112.0, 114.0]
    assert sorted(r["rail_entity_id"] for r in report.recovered) == ["pout_LATE", "rfnd_EARLY"]
    assert intents.require_intent(conn, MERCHANT, "P" * 32).state is State.APPLIED
    conn.close()


class _NoPayouts(_Lists):
    """An upstream MCP server's rail (proxy mode): it makes no payouts, and refuses their lists as rails.mcp_upstream
    does."""

    def list_payouts(self, account_number: str, **kw):  # noqa: ANN003, ANN201
        from rails.mcp_upstream import NO_PAYOUTS
        from rails.razorpay import RailError, RailErrorKind

        raise RailError(RailErrorKind.REJECTED, NO_PAYOUTS, method="MCP", path="list_payouts", http_status=404)


def test_a_shard_whose_rail_makes_no_payouts_is_restored_without_reading_payouts(tmp_path: Path) -> None:
    """Proxy mode: a mandate may still name a RazorpayX account, but the upstream MCP rail makes no payouts and refuses
    to list them. Reading them stopped the restore at every --resume, and the shard never served again (found by the
    simulation: machine loss on a proxy-mode shard, seed 8 of focus machine_loss, webhooks, payouts)."""
    mandates = [make_mandate({"rail": {"account_number": "7878780080316316"}})]
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    rail = _NoPayouts([_refund("rfnd_A", "A" * 32, "pay_RESTOREA0001", 1_000, (MERCHANT, AGENT))])
    with pytest.raises(RailError, match="payouts are made only on the REST rail"):
        restore.run(conn, rail, mandates, now=lambda: 2_000, actor="test", **NO_WAIT)
    assert marks.pending(conn) is not None  # the rail worker stays refused: for ever, before
    restore.run(conn, rail, mandates, now=lambda: 2_000, actor="test", payouts=False, **NO_WAIT)
    assert marks.pending(conn) is None  # the --resume of a deployment whose rail makes no payouts finishes
    assert intents.require_intent(conn, MERCHANT, "A" * 32).state is State.APPLIED
    conn.close()


def test_a_shard_of_several_merchants_records_a_lost_entity_under_the_merchant_and_agent_it_names(
    tmp_path: Path,
) -> None:
    """Shards serve many merchants, each mandate granting refunds: the entity's notes say whose call it was. One that
    names nobody this shard serves, or that was sent before entities named their owner, stops the restore."""
    other = make_mandate({"mandate_id": "mnd_other", "merchant_id": "acc_OTHER000001", "agent_id": "agent_other"})
    mandates = [load_mandate(EXAMPLE), other]
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    rail = _Lists([_refund("rfnd_A", "A" * 32, "pay_RESTOREA0001", 1_000, (MERCHANT, AGENT)),
                   _refund("rfnd_B", "B" * 32, "pay_RESTOREB0001", 2_000, ("acc_OTHER000001", "agent_other"))])
    report = restore.run(conn, rail, mandates, now=lambda: 2_000, actor="test", **NO_WAIT)
    assert sorted((r["merchant_id"], r["rail_entity_id"]) for r in report.recovered) == [
        ("acc_DEMO000001", "rfnd_A"), ("acc_OTHER000001", "rfnd_B")]  # fmt: skip
    mine = intents.require_intent(conn, "acc_OTHER000001", "B" * 32)
    assert (mine.state, mine.agent_id, mine.mandate_id) == (State.APPLIED, "agent_other", "mnd_other")
    assert intents.get_intent(conn, MERCHANT, "B" * 32) is None
    for entity, refusal in [
        (_refund("rfnd_C", "C" * 32, "pay_RESTOREC0001", 3_000, ("acc_GONE00000001", "agent_x")),
         "names merchant acc_GONE00000001 and agent agent_x, whom no mandate of this shard"),
        (_refund("rfnd_D", "D" * 32, "pay_RESTORED0001", 3_000), "cannot be told whose it is"),
    ]:
        restore.begin(conn, now=lambda: 3_000, actor="test", margin_ms=10_000)
        with pytest.raises(restore.RestoreRefused, match=refusal):
            restore.run(conn, _Lists([entity]), mandates, now=lambda: 3_000, actor="test", **NO_WAIT)
        assert marks.pending(conn) is not None  # the rail worker stays refused
        restore.run(conn, _Lists([]), mandates, now=lambda: 3_000, actor="test", **NO_WAIT)  # the --resume, fixed
    assert audit.verify_chain(conn) is None
    conn.close()


def test_a_refund_recovered_from_the_rail_counts_against_the_ceiling_of_each_task_its_agent_presents(
    tmp_path: Path,
) -> None:
    """Finding F-loss-3 (docs/simulation.md; the machine-loss simulation, seed 24 of focus machine_loss): the lost
    tail paid refunds under a harness-signed task; the restore recovered them, bound to no task (the rail's entity
    does not say which), so the task's ceiling counted nothing of them and the agent's next refund under the task
    took it past its ceiling. A recovered intent of the task's merchant and agents now counts against each of their
    tasks (over-counting refuses, never pays); one of another agent does not."""
    from interlock.messages import Verdict
    from ledger.limits import check_task_ceiling

    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    restore.run(conn, _Lists([_refund("rfnd_T", "T" * 32, "pay_RESTORET0001", 6_000, (MERCHANT, AGENT))]),
                [load_mandate(EXAMPLE)], now=lambda: 2_000, actor="test", **NO_WAIT)  # fmt: skip

    def ceiling(agents: tuple[str, ...]) -> Verdict:
        return check_task_ceiling(conn, signer="harness", task_id="task_1", sik="N" * 32, amount_minor=5_000,
                                  ceiling_minor=10_000, recovered_for=(MERCHANT, agents)).verdict  # fmt: skip

    assert ceiling((AGENT,)) is Verdict.BLOCK  # 6,000 recovered + 5,000 asked > 10,000
    assert ceiling(("agent_other",)) is Verdict.ALLOW
    conn.close()


class _Account(_Lists):
    """A scripted rail whose RazorpayX account *account_number* holds *payouts*; every account it is asked for is
    noted."""

    def __init__(self, refunds: list[dict], account_number: str, payouts: list[dict]) -> None:
        from rails.models import Payout

        super().__init__(refunds)
        self.account_number, self.asked = account_number, []
        self.payouts = [Payout.from_raw(p) for p in payouts]

    def list_payouts(self, account_number: str, *, reference_id=None, status=None, count: int = 100,  # noqa: ANN001
                     skip: int = 0):  # noqa: ANN201
        from rails.models import Page

        self.asked.append(account_number)
        mine = self.payouts if account_number == self.account_number else []
        return Page(items=mine[skip:skip + count], requested_count=count, skip=skip)


def test_a_call_the_lost_tail_made_is_recovered_though_the_agents_mandate_no_longer_grants_its_tool(
    tmp_path: Path,
) -> None:
    """Finding F-loss-1 (docs/simulation.md; the machine-loss simulation, seed 113 of focus machine_loss): the lost
    tail paid payouts and a settlement for an agent whose mandate was then replaced by one granting neither. The
    restore read the payout accounts only of mandates granting payouts, and attributed an entity only to a mandate
    granting its tool: the payouts were never read (the restored ledger did not know them, G3 counted three calls
    fewer, the withdrawal of queued payouts never saw them), and a settlement would have stopped the restore for a
    person. Whose an entity is, its notes say; the money moved under the mandate the tail had."""
    account = make_mandate().rail.account_number
    replaced = make_mandate({"mandate_id": "mnd_replaced"},
                            drop=("scope.grants.create_payout", "scope.grants.create_instant_settlement",
                                  "idempotency.create_payout", "idempotency.create_instant_settlement"))  # fmt: skip
    assert replaced.rail.account_number == account and replaced.grant("create_payout") is None
    conn = open_ledger(tmp_path / "ledger.sqlite3")
    restore.begin(conn, now=lambda: 2_000, actor="test", margin_ms=10_000)
    owner = {"interlock_merchant": MERCHANT, "interlock_agent": AGENT}
    payout = {"id": "pout_LOST", "entity": "payout", "fund_account_id": "fa_DEMOVENDOR0001", "amount": 7_000,
              "currency": "INR", "status": "processed", "reference_id": "ilk_" + "P" * 32,
              "notes": {"interlock_sik": "P" * 32, **owner}, "created_at": 2}  # fmt: skip
    rail = _Account([_refund("rfnd_LOST", "R" * 32, "pay_RESTORER0001", 1_000, (MERCHANT, AGENT))], account, [payout])
    report = restore.run(conn, rail, [replaced], now=lambda: 2_000, actor="test", **NO_WAIT)
    assert set(rail.asked) == {account}
    assert sorted((r["tool"], r["rail_entity_id"]) for r in report.recovered) == [
        ("create_payout", "pout_LOST"), ("create_refund", "rfnd_LOST")]  # fmt: skip
    recovered = intents.require_intent(conn, MERCHANT, "P" * 32)
    assert (recovered.state, recovered.agent_id, recovered.mandate_id) == (State.APPLIED, AGENT, "mnd_replaced")
    assert marks.pending(conn) is None
    conn.close()


def test_shards_restore_restores_the_replica_marks_it_and_reads_the_rail(tmp_path: Path, rail_sandbox: SandboxProcess,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The command an operator runs at 3 a.m.: Litestream's restore, the mark before the file takes its name, the
    rail's lists read; a second restore onto the same path is refused."""
    from click.testing import CliRunner

    from interlock.cli import cli
    from ledger import replication

    primary = tmp_path / "machine-a" / "ledger.sqlite3"
    primary.parent.mkdir()
    conn = open_ledger(primary)
    put_intent(conn, "I" * 32, "IN_FLIGHT", amount=4_000, subject="pay_RESTOREI0001", now=now_ms())
    conn.close()
    replica_url = (tmp_path / "other-disk").as_uri()
    config = replication.write_config(primary.parent, primary, replica_url, sync_interval="100ms")
    streaming = subprocess.Popen(replication.replicate_command(config), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until(lambda: replication.position(config, primary).replica_txid is not None, timeout=60,
                   what="the ledger on the replica")  # fmt: skip
    finally:
        streaming.kill()
        streaming.wait(10)
    for name, value in {**rail_sandbox.rail_env(), "INTERLOCK_MANDATE": str(EXAMPLE)}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("INTERLOCK_SHARDS", raising=False)
    restored = tmp_path / "machine-b" / "ledger.sqlite3"
    args = ["shards", "restore", "--replica", replica_url, "--ledger", str(restored), "--margin-ms", "0",
            "--old-machine-fenced"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "restore finished" in result.output and "1 intents in motion now UNKNOWN" in result.output, result.output
    conn = open_ledger(restored, readonly=True)
    try:
        assert marks.pending(conn) is None and audit.verify_chain(conn) is None
        assert intents.require_intent(conn, MERCHANT, "I" * 32).state is State.UNKNOWN
    finally:
        conn.close()
    again = CliRunner().invoke(cli, args)
    assert again.exit_code != 0 and "already exists" in f"{again.output} {again.exception}", again.output


def test_operator_commands_refuse_to_write_an_unfinished_restore_and_may_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Holds expired on a console page, an approval, a quarantine resolved: all write through ops/context."""
    from interlock.config import load_settings
    from interlock.errors import RestorePending
    from ops.context import OpsContext

    ledger = tmp_path / "ledger.sqlite3"
    conn = open_ledger(ledger)
    with transaction(conn):
        audit.append(conn, marks.STARTED, {"last_seq": 0, "last_commit_ms": 0, "window_from_ms": 0}, 1)
    conn.close()
    monkeypatch.setenv("INTERLOCK_LEDGER", str(ledger))
    monkeypatch.setenv("INTERLOCK_MANDATE", str(EXAMPLE))
    monkeypatch.delenv("INTERLOCK_SHARDS", raising=False)
    ops = OpsContext.from_settings(load_settings())
    with pytest.raises(RestorePending, match="restore has not finished"), ops.ledger():
        pass
    with ops.ledger(readonly=True) as reading:
        assert marks.pending(reading) is not None
