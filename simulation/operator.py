"""The operator: a person at `interlock holds` and `interlock quarantine`, one per deployment.

Every few simulated seconds they list each shard's holds (`ops.holds.list_holds`, which also expires the old
ones) and decide each a while after it appeared: approve it (`ops.holds.approve`, with their own credential and
the terms digest `holds list` prints) or reject it (`ops.holds.reject`). An approval the production code refuses —
the window filled up behind the hold, the mandate was replaced, the payment no longer has room, the rail could
not be read — is tried again on a later pass, and rejected after a few refusals. QUARANTINED intents are resolved
with the rail's evidence as `interlock quarantine resolve` asks for it: the operator pages the rail for the stamp
(`ops.rail_check.page_for_stamp`) and resolves `--applied ID` or `--not-applied`; `ops.quarantine.resolve`
re-checks both.

Only the context is the simulator's: `SimOpsContext` hands the ops functions the shard's simulated ledger
connections, rail, Redis and current mandates where `OpsContext` would open files and sockets.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from interlock.errors import InterlockError, LedgerError, OperatorRefused
from interlock.queues import rail_queue
from ledger.intents import Intent
from ops import held_payees
from ops.approvers import Approver, ApproverTable, token_sha256
from ops.context import OpsContext
from ops.holds import approve, list_holds, reject, terms_digest
from ops.quarantine import list_quarantined, resolve
from ops.rail_check import page_for_stamp
from rails.razorpay import RailError
from simulation.ledger import open_sim_ledger
from simulation.scheduler import Process
from simulation.workload import Workload
from simulation.world import Shard, World

logger = logging.getLogger(__name__)

APPROVER_ID = "ops@example.com"  # the approver every simulated mandate names
APPROVER = Approver(APPROVER_ID, token_sha256("simulated-operator-credential-0123456789"))
MAX_REFUSALS = 3


class _RailSession:
    """The rail as `OpsContext.rail()` gives it: a client to use in a `with` block, or to close."""

    def __init__(self, rail: Any) -> None:
        self._rail = rail

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rail, name)

    def __enter__(self) -> _RailSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None


class SimOpsContext(OpsContext):
    """An OpsContext over one simulated shard: its ledger (through the simulated connection class), rail, Redis,
    the mandates configured now, and the one approver's credential file."""

    def __init__(self, world: World, shard: Shard, process: Process) -> None:
        super().__init__(settings=shard.settings, _redis=shard.redis)  # type: ignore[arg-type]
        self.world, self.shard_name, self.process = world, shard.name, process

    @property
    def sim_shard(self) -> Shard:
        """The shard as it is now: one restored after its machine was lost has another ledger file and another Redis
        (simulation.machine_loss)."""
        return self.world.shards[self.shard_name]

    def redis(self) -> Any:
        return self.sim_shard.redis

    def mandates(self) -> Any:
        return self.sim_shard.mandates

    def approvers(self) -> ApproverTable:
        return ApproverTable({APPROVER.approver_id: APPROVER.token_sha256})

    @contextmanager
    def ledger(self, *, readonly: bool = False) -> Iterator[sqlite3.Connection]:
        if not self.sim_shard.ledger_path.exists():  # its machine is lost, and the restore has not put one in its place
            raise LedgerError(f"ledger {self.sim_shard.ledger_path} does not exist")
        conn = open_sim_ledger(self.sim_shard.ledger_path, self.world.sched, self.process, self.world.faults.writes,
                               readonly=readonly)  # fmt: skip
        try:
            yield conn
        finally:
            conn.close()

    def rail(self) -> Any:
        return _RailSession(self.sim_shard.rail)

    def rail_jobs(self) -> Any:
        return self.sim_shard.redis.queue(rail_queue(self.sim_shard.name))


def start_operator(world: World, w: Workload) -> None:
    proc = world.sched.process("operator", crashable=False)
    contexts = [SimOpsContext(world, shard, proc) for shard in world.shards.values()]
    world.sched.spawn("operator", proc, lambda: _operate(world, w, contexts))


def _operate(world: World, w: Workload, contexts: list[SimOpsContext]) -> None:
    sched, rng = world.sched, w.rng
    due: dict[str, int] = {}  # sik -> the mono ms the operator gets to it
    refusals: dict[str, int] = {}
    while True:
        # Holds need a person within minutes; without them the operator looks in now and then for quarantines.
        holding = w.holds or w.payee_hold
        sched.sleep(rng.randrange(2_000, 8_000) if holding else rng.randrange(10_000, 30_000))
        for ctx in contexts:
            try:
                holds = list_holds(ctx) if holding else []
                quarantined = list_quarantined(ctx)
            except (InterlockError, sqlite3.Error) as exc:
                w.operator["list_failed"] += 1
                logger.warning("operator: cannot list %s: %s", ctx.shard, exc)
                continue
            for intent in holds:
                at = due.setdefault(intent.sik, sched.clock.mono_ms + rng.randrange(15_000, 45_000))
                if sched.clock.mono_ms >= at:
                    _decide(ctx, w, intent, refusals)
            for intent in quarantined:
                at = due.setdefault(intent.sik, sched.clock.mono_ms + rng.randrange(5_000, 60_000))
                if sched.clock.mono_ms >= at and not _resolve(ctx, w, intent):
                    due[intent.sik] = 1 << 62


def _decide(ctx: SimOpsContext, w: Workload, intent: Intent, refusals: dict[str, int]) -> None:
    record = {"shard": ctx.shard, "merchant": intent.merchant_id, "sik": intent.sik}
    # A hold decided before comes back only when its shard was restored from a replica that lost the decision
    # (simulation.machine_loss): the person decides it as they did, not afresh.
    restored = any(r["shard"] == ctx.shard for r in w.restores)
    before = next((verdict for verdict, done in (("approve", w.approved), ("reject", w.rejected))
                   if restored and any(r["shard"] == ctx.shard and r["sik"] == intent.sik for r in done)),
                  None)  # fmt: skip
    try:
        if before != "reject" and refusals.get(intent.sik, 0) < MAX_REFUSALS and (
                before == "approve" or w.rng.random() < 0.7):  # fmt: skip
            # A payout held for a payee on no list (ADR 0034): the person adds the payee half the time, as
            # `holds approve --allow-payee DIGEST` does with the digest `holds list` shows.
            digest = _payee_to_add(ctx, w, intent) if w.payee_hold else None
            approve(ctx, intent.sik, approver=APPROVER, terms_digest=terms_digest(intent), reason="simulated approval",
                    merchant_id=intent.merchant_id, allow_payee=digest)  # fmt: skip
            if digest is not None:
                w.operator["approved, payee added"] += 1
            w.approved.append(record)
            w.operator["approved"] += 1
        else:
            reject(ctx, intent.sik, approver=APPROVER, reason="simulated rejection", merchant_id=intent.merchant_id)
            w.rejected.append(record)
            w.operator["rejected"] += 1
    except OperatorRefused as exc:
        refusals[intent.sik] = refusals.get(intent.sik, 0) + 1
        code = re.search(r"\b(G\d_[A-Z_]+|HOLD_EXPIRED|not HELD)", str(exc))
        w.operator[f"refused {code.group(1) if code else 'other'}"] += 1
        logger.info("operator: %s refused: %s", intent.sik, exc)
    except (InterlockError, sqlite3.Error, RailError) as exc:  # a failed write: the hold is still there next pass
        w.operator["failed"] += 1
        logger.warning("operator: deciding %s failed: %s", intent.sik, exc)


def _payee_to_add(ctx: SimOpsContext, w: Workload, intent: Intent) -> str | None:
    """The payee digest a held payout's approver names to add its payee, half the time; None for any other hold."""
    with ctx.ledger(readonly=True) as conn:
        shown = held_payees.shown(conn, intent)
    digest = shown.get("payee_digest") if shown is not None else None
    return str(digest) if digest and w.rng.random() < 0.5 else None


def _resolve(ctx: SimOpsContext, w: Workload, intent: Intent) -> bool:
    """False when the person leaves it for an investigation (not looked at again)."""
    try:
        found = page_for_stamp(ctx.rail(), intent)
        if found.matched_entity_id is not None:
            resolve(ctx, intent.sik, operator_id=APPROVER_ID, applied_entity_id=found.matched_entity_id,
                    not_applied=False, evidence="paged the rail", merchant_id=intent.merchant_id)  # fmt: skip
            w.operator["resolved applied"] += 1
        elif found.passed_over:
            # Our stamp on other terms (ADR 0016): money moved under this intent's stamp. The person investigates
            # rather than declare it not applied; it stays QUARANTINED.
            w.operator["left quarantined (stamped on other terms)"] += 1
            return False
        elif found.exhausted:
            resolve(ctx, intent.sik, operator_id=APPROVER_ID, applied_entity_id=None, not_applied=True,
                    evidence="paged the rail to the end", merchant_id=intent.merchant_id)  # fmt: skip
            w.operator["resolved not applied"] += 1
    except OperatorRefused as exc:
        w.operator["resolve refused"] += 1
        logger.info("operator: resolving %s refused: %s", intent.sik, exc)
    except (InterlockError, sqlite3.Error, RailError) as exc:
        w.operator["failed"] += 1
        logger.warning("operator: resolving %s failed: %s", intent.sik, exc)
    return True
