"""A shard's machine lost mid-run, and the shard restored from its replica (ADR 0029; issue 45, item 4).

While the shard runs, its ledger is copied at commit points as Litestream's replica would hold it: SQLite's online
backup, taken right after a COMMIT (simulation.ledger calls `WriteFaults.committed`), so each copy is a prefix of the
ledger's commits. At a drawn moment — or as one of the shard's money requests leaves, so that it is on the wire when
the machine goes — every process of the shard (rail workers, gate workers, reconcilers) is lost:

* **dead** (most seeds): stopped where they are, never restarted; or **paused**: stopped for a while and then running
  again, until the machine is powered off some seconds later. A paused machine is fenced from the rail before it
  wakes (`fence`) — the simulated rail refuses its calls as unreachable from then on, and a request of it that left
  after the fence would be named by the checker (FENCED). A request that had already left still lands: the one on
  the wire when the loss struck lands after its caller's deadline, inside the reconcile delay (the rail's late apply),
  at once with its answer lost, or never. What the lost processes held in memory, and what they write to the old
  ledger after the loss, is no longer the shard's.
* the shard's Redis is lost (flushed; the new machine's is another, empty one);
* a replica prefix becomes the new ledger file at a new path: the newest commit, one of the last copies, or one taken
  much earlier — any number of commits behind.

Then the restore runs as `interlock shards restore --replica ... --old-machine-fenced` runs it, as the actor of a
process `restore:<shard>` that may crash (it is run again, as `--resume`): the prefix is written to a staging file
(Litestream's restore, which is not executed here), `ops.restore.begin` marks it, it takes the ledger's name, and
`ops.restore.run` reads the rail with the deployment's call deadline and reconcile delay, on the simulated clock.
The shard's processes then start again on the restored ledger, as new incarnations with new owners — in some seeds
the rail and gate workers already while the restore runs, so that `boot` meets the restore's mark — and the rail
worker waits out the restored lease as `boot` does. The agents keep repeating what they were told nothing definite
about, and ask once more for every action they were told APPLIED before the loss.

What the checker needs (`LossPlan.evidence`): the shard, when it was lost, how many answers the agents had been
given by then, and the restore's report or the reason it was refused.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from interlock.clock import now_ms
from ledger.restore import pending
from ops import restore
from rails.base import RAIL_REST
from simulation.ledger import open_sim_ledger
from simulation.redis import SimRedis
from simulation.scheduler import LOST, Process
from simulation.workload import Workload
from simulation.world import DEFINITE_ACTIONS, Shard, World

logger = logging.getLogger(__name__)

SHARE = 0.15  # of the seeds lose a machine (swarm-style; its own generator, so the other seeds are unchanged)
ROLES = ("rail-a", "rail-b", "gate-a", "gate-b", "reconciler", "reconciler-b", "webhooks")
RAIL_ROLES, GATE_ROLES = ("rail-a", "rail-b"), ("gate-a", "gate-b")
FOREVER = 1 << 62
RING = 5  # the replica copies kept near the loss, besides the newest and one much older
PENDING = -1  # in world.pending until the restore has finished: the run does not settle before it
WIRE = ("late_apply", "ok", "not_applied")  # what becomes of the request on the wire as the machine is lost


@dataclass
class _Copy:
    commit: int  # how many commits of the shard's ledger it holds
    mono_ms: int
    db: sqlite3.Connection  # an in-memory copy


@dataclass
class LossPlan:
    rng: random.Random
    on: bool = False
    shard: str = "s0"
    at_ms: int = 0  # armed from here
    at_send: bool = False  # the loss strikes as a money request of the shard leaves (by at_ms + SEND_WAIT_MS)
    wire: str = "late_apply"
    paused: bool = False
    pause_ms: int = 0
    fence_ms: int = 0  # after the loss, while a paused machine is still stopped
    off_ms: int = 0  # a paused machine runs this long after it wakes, then it is powered off
    restore_ms: int = 0  # after the fence
    early_start: bool = False  # rail and gate workers start while the restore runs (boot meets the mark)
    replica: str = "ring"  # newest | ring | early
    # Evidence and state.
    record: dict[str, Any] = field(default_factory=dict)
    restores: list[dict[str, Any]] = field(default_factory=list)  # the workload's evidence, which the record joins
    replacing: list[str] = field(default_factory=list)  # agents whose mandate the workload replaces
    commits: int = 0
    ring: deque[_Copy] = field(default_factory=lambda: deque(maxlen=RING))
    early: _Copy | None = None
    early_at_ms: int = 0
    prefix: _Copy | None = None
    lost: bool = False
    started: bool = False


SEND_WAIT_MS = 15_000
MAX_RUNS = 30  # of the restore (the first, then `--resume`), before the operator gives up and calls a person
NOTICE_MS = (0, 100, 500, 1_000, 3_000, 10_000)  # from the fence to the restore's start


def plan_loss(seed: int, disabled: frozenset[str] = frozenset(), focus: frozenset[str] = frozenset(), *,
              move: bool = False) -> LossPlan:  # fmt: skip
    """Whether and how this seed loses a machine; drawn from a generator of its own, so that the seeds without a
    loss run as they did before it existed. Never with the merchant's move: the shard map names each ledger's path,
    and a shard restored on a new path would need a new map (out of scope here)."""
    rng = random.Random(f"machine_loss:{seed}")
    p = LossPlan(rng)
    drawn = rng.random() < SHARE
    p.on = "machine_loss" not in disabled and not move and ("machine_loss" in focus or drawn)
    p.shard = rng.choice(("s0", "s1"))
    # Mostly while the first calls are being made and repeated, else anywhere in the first half of the fault phase.
    p.at_ms = rng.randint(500, 8_000) if rng.random() < 0.6 else rng.randint(1_000, 40_000)
    p.at_send = rng.random() < 0.6
    p.wire = rng.choices(WIRE, (0.5, 0.3, 0.2))[0]
    p.paused = rng.random() < 0.35
    p.pause_ms = rng.randint(1_000, 30_000)
    p.fence_ms = rng.randint(0, min(p.pause_ms - 1, 3_000)) if p.paused else 0
    p.off_ms = rng.randint(1_000, 10_000)
    p.restore_ms = rng.choice(NOTICE_MS)
    p.early_start = rng.random() < 0.5
    p.replica = rng.choices(("newest", "ring", "early"), (0.25, 0.6, 0.15))[0]
    p.early_at_ms = rng.randint(0, p.at_ms)
    return p


def install_loss(world: World, p: LossPlan, w: Workload) -> None:
    """Copy the shard's ledger at commit points, and arm the loss; its record goes with the workload's evidence."""
    if not p.on:
        return
    p.restores, p.replacing = w.restores, w.replacing
    shard = world.shards[p.shard]
    original = shard.ledger_path
    sched = world.sched

    def committed(path: Path) -> None:
        if p.lost or path != original:
            return
        p.commits += 1
        now = sched.clock.mono_ms
        if p.early is None and now >= p.early_at_ms:
            p.early = _Copy(p.commits, now, _copy(path))
        elif now >= p.at_ms - 8_000 and p.rng.random() < 0.3:
            p.ring.append(_Copy(p.commits, now, _copy(path)))

    world.faults.writes.committed = committed
    world.pending.add(PENDING)

    def on_send(fault: str) -> str:
        """Every money request of the shard's rail as it leaves: the loss may strike now; and after the fence, one
        from the lost machine is a breach the checker names (FENCED)."""
        now, actor = sched.clock.mono_ms, sched.current
        if p.started:
            if actor is not None and actor.process.name.startswith(LOST) and now >= p.record["fenced_mono_ms"]:
                p.record["sent_after_fence"].append(f"{actor.process.name} at mono {now}")
            return fault
        if p.lost or not p.at_send or now < p.at_ms:
            return fault
        sched.at(now, lambda: _lose(world, p, on_the_wire=p.wire))
        p.lost = True  # from here on (the loss itself runs before the next step)
        return p.wire

    shard.rail.on_send = on_send
    sched.at(p.at_ms + (SEND_WAIT_MS if p.at_send else 0), lambda: _lose(world, p))


def _copy(path: Path) -> sqlite3.Connection:
    """SQLite's online backup of the ledger as it is between two transactions: a prefix of its commits."""
    src, mem = sqlite3.connect(f"file:{path}?mode=ro", uri=True), sqlite3.connect(":memory:")
    try:
        src.backup(mem)
    finally:
        src.close()
    return mem


def _lose(world: World, p: LossPlan, *, on_the_wire: str | None = None) -> None:
    sched, shard = world.sched, world.shards[p.shard]
    if p.started:
        return
    p.lost = p.started = True
    now = sched.clock.mono_ms
    newest = _Copy(p.commits, now, _copy(shard.ledger_path))
    choices = {"newest": [newest], "ring": list(p.ring) or [newest], "early": [p.early or newest]}[p.replica]
    p.prefix = p.rng.choice(choices)
    fence_at = now + p.fence_ms
    p.record.update({"shard": p.shard, "lost_mono_ms": now, "answers_before": len(world.answers), "paused": p.paused,
                "on_the_wire": on_the_wire, "commits": p.commits, "commits_behind": p.commits - p.prefix.commit,
                     "fenced_mono_ms": fence_at, "restore": None, "refused": None, "runs": 0,
                     "sent_after_fence": []})  # fmt: skip
    p.restores.append(p.record)
    sched.counters.fault("machine_loss")
    sched.note(f"machine of {p.shard} lost ({'paused' if p.paused else 'dead'}), replica {p.replica} "
               f"{p.record['commits_behind']} commits behind, on the wire: {on_the_wire}")  # fmt: skip
    # The shard's Redis is lost with the machine, and the new machine's is empty; the new machine's ledger is the file
    # the restore will put in place. The lost processes keep the Shard they were started with (a paused one keeps
    # its own, emptied, Redis and its old ledger file), the new ones are given the new Shard.
    shard.redis.flush()
    final = world.root / f"ledger-{p.shard}-restored.sqlite3"
    update: dict[str, object] = {"ledger": final}
    hooks = world.webhooks.get(p.shard)
    if hooks is not None:
        # The webhook inbox lay beside the ledger: what the lost receiver stored and the reader had not read is lost
        # with it (Razorpay does not deliver an acknowledged event again). The new receiver stores into a new one.
        hooks.inbox = update["webhook_inbox"] = world.root / f"webhooks-{p.shard}-restored.sqlite3"
    world.shards[p.shard] = replace(shard, redis=SimRedis(sched, p.shard, world.faults.queues), ledger_path=final,
                                    settings=shard.settings.model_copy(update=update))  # fmt: skip
    lost: list[Process] = []
    for role in ROLES:
        name = f"{role}:{p.shard}"
        old = sched.processes.pop(name, None)
        if old is None:
            continue
        # The lost machine's processes keep running under another name (if paused); the shard's names go to the new
        # machine's, whose incarnations follow the old ones (new owners: the restored lease names an old one).
        old.restart = None
        sched.stopped.add((name, old.incarnation))  # whatever it holds in memory is no longer the shard's
        old.name = f"{LOST}{name}"
        sched.stopped.add((old.name, old.incarnation))
        sched.processes[old.name] = old
        sched.processes[name] = Process(name, restart_after_ms=1_500, incarnation=old.incarnation + 1, dead=True)
        lost.append(old)
        if p.paused and not old.dead:
            old.paused_until = max(old.paused_until or 0, now + p.pause_ms)
        else:
            sched.crash(old, fault=False)

    if p.paused:
        sched.at(fence_at, lambda: fence(world, shard, lost))
        for old in lost:
            sched.at(now + p.pause_ms + p.off_ms, lambda old=old: sched.crash(old, fault=False))  # type: ignore[misc]
    else:
        fence(world, shard, lost)
    sched.at(fence_at + p.restore_ms, lambda: _start_restore(world, p))


def fence(world: World, shard: Shard, lost: list[Process]) -> None:
    """`--old-machine-fenced`: the lost machine is cut off from the rail for good — its requests are refused as
    unreachable from now on; one already on the wire still lands. The restore is only as good as this: a paused
    machine that woke unfenced would send what the restored shard pays again."""
    for old in lost:
        shard.rail.partition(old.name, FOREVER)
    world.sched.note(f"old machine of {shard.name} fenced from the rail")


def _start_restore(world: World, p: LossPlan) -> None:
    shard = world.shards[p.shard]
    final = shard.ledger_path
    deadline_s, delay_s = shard.settings.rail_timeout_ms / 1000, shard.settings.reconcile_min_delay_ms / 1000
    sched = world.sched
    p.record["restore_started_mono_ms"] = sched.clock.mono_ms

    def body(proc: Process) -> None:
        p.record["runs"] += 1
        actor = f"restore@{proc.name}#{proc.incarnation}"
        if not final.exists():
            staging = final.with_name(final.name + ".restoring")
            for stale in (staging, *(staging.with_name(staging.name + s) for s in ("-wal", "-shm"))):
                stale.unlink(missing_ok=True)
            _litestream_restore(p, staging)
            conn = open_sim_ledger(staging, sched, proc, world.faults.writes)
            try:
                restore.begin(conn, now=now_ms, actor=actor)
            finally:
                conn.close()
            for suffix in ("-wal", "-shm"):
                side = staging.with_name(staging.name + suffix)
                if side.exists():
                    os.replace(side, final.with_name(final.name + suffix))
            os.replace(staging, final)
            if p.early_start:
                _start_machine(world, p, RAIL_ROLES + GATE_ROLES)
        conn = open_sim_ledger(final, sched, proc, world.faults.writes)
        try:
            if pending(conn) is not None:  # `--resume` after a run that stopped half way
                mandates = list(shard.mandates.as_dict().values())
                report = restore.run(conn, shard.rail, mandates, now=now_ms, actor=actor,  # type: ignore[arg-type]
                                     deadline_s=deadline_s, reread_after_s=delay_s,
                                     payouts=shard.settings.rail == RAIL_REST)  # fmt: skip
                p.record["restore"] = {k: v if isinstance(v, int) else len(v) for k, v in report.summary().items()}
        except restore.RestoreRefused as exc:
            p.record["refused"] = str(exc)
            sched.note(f"restore of {p.shard} refused: {str(exc)[:100]}")
            proc.restart = None
            world.pending.discard(PENDING)
            return
        except Exception as exc:  # a rail read or a ledger write failed: the operator runs `--resume`
            p.record["last_error"] = f"{type(exc).__name__}: {exc}"
            if p.record["runs"] >= MAX_RUNS:
                p.record["refused"] = f"gave up after {MAX_RUNS} runs; the last failed with {p.record['last_error']}"
                proc.restart = None
                world.pending.discard(PENDING)
            raise
        finally:
            conn.close()
        proc.restart = None  # done: the process exits and nobody starts it again
        p.record["restore_finished_mono_ms"] = sched.clock.mono_ms
        sched.note(f"restore of {p.shard} finished")
        _start_machine(world, p, ROLES)
        _ask_again(world, p)
        world.pending.discard(PENDING)

    world._supervised(f"restore:{p.shard}", body)


def _litestream_restore(p: LossPlan, staging: Path) -> None:
    """`litestream restore` into the staging file: the chosen prefix (the binary itself runs in
    tests/ledger/test_replication.py, not here)."""
    assert p.prefix is not None
    out = sqlite3.connect(staging)
    try:
        p.prefix.db.backup(out)
    finally:
        out.close()


def _start_machine(world: World, p: LossPlan, roles: tuple[str, ...]) -> None:
    """The new machine's processes (what `interlock up` starts there), each once."""
    shard, sched = world.shards[p.shard], world.sched
    for role in roles:
        name = f"{role}:{p.shard}"
        proc = sched.processes.get(name)
        if proc is None or not proc.dead or proc.restart is not None:
            continue  # not part of this deployment, or already started
        proc.dead = False
        shard.rail.partitioned_until.pop(name, None)  # a new machine, on a network of its own
        if role in RAIL_ROLES:
            world._rail_worker(shard, role)
        elif role in GATE_ROLES:
            world._gate_worker(shard, role)
        elif role == "webhooks":
            world._supervised(name, world.webhooks[p.shard].serve)
        else:
            world._reconciler(shard, role)


def _ask_again(world: World, p: LossPlan) -> None:
    """Every agent asks once more, until it has a definite answer, for each action of the shard it was told APPLIED
    before the loss ("did that refund go through?"): the answer must not contradict the first.

    Not the agent whose mandate the run replaces: once the new mandate withdraws a tool's grant, a repeat of an
    APPLIED call of that tool is refused G1_TOOL_NOT_GRANTED, restore or not — without the grant's idempotency window
    the gate keys no SIK, so the repeat cannot land on its intent (docs/simulation.md, left open)."""
    before = world.answers[: p.record["answers_before"]]
    told = {id(a.action) for a in before if a.shard == p.shard and a.structured.get("state") == "APPLIED"
            and a.structured.get("caller_action") in DEFINITE_ACTIONS
            and a.action.agent not in p.replacing}  # fmt: skip
    again = [i for i, action in enumerate(world.actions) if id(action) in told]
    p.record["asked_again"] = len(again)
    by_agent: dict[str, list[int]] = {}
    for i in again:
        by_agent.setdefault(world.actions[i].agent, []).append(i)
        world.pending.add(i)
    for agent, mine in sorted(by_agent.items()):
        proc = world.sched.process(f"agent:{agent}:again", crashable=False)
        world.sched.spawn(f"agent:{agent}.again", proc, lambda mine=mine: world._agent(mine))  # type: ignore[misc]
