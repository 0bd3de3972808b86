"""Run seeds: build the world a seed describes, run it with faults, let it settle without them, and check it.

A seed decides everything: the deployment's shape (shards, merchants, agents, actions), which fault kinds are
on and how often (swarm testing: most seeds enable a few kinds, so that rare orderings are not drowned out by
common ones), the wall clock's start (sometimes just before a window boundary), and every scheduling choice.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.clock import use_clock
from simulation import checker
from simulation.checker import ShardEvidence, Violation
from simulation.clocks import SHORT_GRACE, SKEW, install_clocks, plan_skew
from simulation.ledger import write_times
from simulation.machine_loss import install_loss, plan_loss
from simulation.operator import start_operator
from simulation.scheduler import Scheduler
from simulation.workload import install, plan_workload
from simulation.world import DAY_MS, Faults, World

FAULT_PHASE_MS = 90_000  # simulated time with faults on
SETTLE_MS = 900_000  # then this long without faults, for everything to become definite
START_MS = 1_900_000_000_000 - 1_900_000_000_000 % DAY_MS  # a day boundary (UTC) of the windows


@dataclass
class SeedResult:
    seed: int
    trace_hash: str
    steps: int
    money_calls: int
    faults: Counter[str]
    violations: list[Violation]
    sim_ms: int
    trace_tail: list[str] = field(default_factory=list)
    edges: Counter[str] = field(default_factory=Counter)  # state-machine edges taken, "FROM -EVENT-> TO"
    operator: Counter[str] = field(default_factory=Counter)  # what the operator did (holds, quarantines, moves)

    @property
    def ok(self) -> bool:
        return not self.violations


RAIL_FAULTS = ("lost_answer", "not_applied", "error_not_applied", "late_apply", "key_forgotten", "other_terms",
               "replayed_response")
FAULT_KINDS = ("crash", "pause", "partition", "clock_step", "redis_flush", "ledger_busy", "ledger_commit_error",
               "queue", "rail_money", "rail_read_error", "list_lag", "rail_outage", "refund_list_late",
               "key_expiry", SKEW)  # fmt: skip


def plan_faults(sched: Scheduler, disabled: frozenset[str] = frozenset(),
                focus: frozenset[str] = frozenset()) -> Faults:  # fmt: skip
    """The seed's swarm: each fault kind is on with some probability, at a rate drawn for this seed. *disabled*
    kinds are drawn all the same (so the rest of the seed's choices stay where they were) and then left off;
    *focus* kinds are drawn the same way and then always on (a search aimed at one defect's ingredients)."""
    rng = sched.rng
    f = Faults()

    def on(kind: str, p: float) -> bool:
        drawn = rng.random() < p
        return (drawn or kind in focus) and kind not in disabled

    crash, pause = rng.choice((0.002, 0.005, 0.01)), rng.choice((0.002, 0.005, 0.01))
    f.crash = crash if on("crash", 0.5) else 0.0
    f.pause = pause if on("pause", 0.5) else 0.0
    f.partition = rng.choice((0.002, 0.005)) if on("partition", 0.3) else 0.0
    f.clock_step = rng.choice((0.002, 0.005)) if on("clock_step", 0.5) else 0.0
    f.redis_flush = 0.001 if on("redis_flush", 0.2) else 0.0
    f.writes.begin_busy = rng.choice((0.01, 0.05)) if on("ledger_busy", 0.4) else 0.0
    f.writes.commit_error = rng.choice((0.01, 0.05)) if on("ledger_commit_error", 0.4) else 0.0
    q = f.queues
    lose, dup = rng.choice((0.0, 0.05, 0.1)), rng.choice((0.0, 0.05, 0.2))
    delay, reorder = rng.choice((0.0, 0.1, 0.3)), rng.choice((0.0, 0.3))
    if on("queue", 0.5):
        q.lose, q.duplicate, q.delay, q.reorder = lose, dup, delay, reorder
    weights = {k: rng.choice((0.0, 0.05, 0.15)) for k in RAIL_FAULTS}
    weights["other_terms"] = min(weights["other_terms"], 0.03)
    if on("rail_money", 0.7):
        weights["ok"] = max(0.0, 1.0 - sum(weights.values()))
        f.rail.money = weights
    read_error, lag = rng.choice((0.02, 0.1)), rng.choice((500, 3_000, 20_000))
    f.rail.read_error = read_error if on("rail_read_error", 0.4) else 0.0
    f.rail.list_lag_ms = lag if on("list_lag", 0.5) else 0
    # Refunds listed past ADR 0010's bound, by less than the delay (what the keyed early read must survive); a rail
    # that forgets idempotency keys within the delay; one that checks a refund's amount before its receipt.
    past, key_ttl = rng.choice((400, 850)), rng.choice((200, 800))
    if on("refund_list_late", 0.4):
        f.rail.refund_list_past_bound_ms = past
    if on("key_expiry", 0.5):
        f.rail.idempotency_key_ttl_ms = key_ttl
    f.rail.refund_amount_checked_first = rng.random() < 0.5
    # The rail workers stop for a while: from the start (so the first calls, made just before a window boundary,
    # wait in the rail queue while their repeats are judged after it) or at some moment of the fault phase.
    at, outage_ms = rng.choice((0, rng.randint(0, FAULT_PHASE_MS - 20_000))), rng.randint(3_000, 20_000)
    both = rng.random() < 0.5
    if on("rail_outage", 0.3):
        f.outage_at_ms, f.outage_ms, f.outage_both = at, outage_ms, both
    if RECONCILER_PAUSE in focus:  # never drawn: the seeds without this focus keep every draw they had
        f.reconciler_pause = 0.25
    if AMBIGUOUS_RETRIES in focus:  # nor this: a rail whose calls often fail ambiguously, applied or not
        f.rail.money = {"error_not_applied": 0.25, "lost_answer": 0.25, "ok": 0.5}
    return f


# Beside the fault kinds, a focus may name parts of the deployment a seed otherwise draws, or a place to strike.
TWO_RECONCILERS = "two_reconcilers"
MOVE = "move"  # the workload's merchant moved between shards (simulation.shard_move)
RECONCILER_PAUSE = "reconciler_pause"  # a reconciler paused between its due list and a pass (Faults.reconciler_pause)
# Money calls answered ambiguously a quarter of the time without being applied (a 500) and a quarter of the time
# applied with the answer lost (a 504): a first attempt read absent, and the retry it authorizes out with its answer
# unknown, in most seeds instead of a few.
AMBIGUOUS_RETRIES = "ambiguous_retries"
# The workload's holds decided by the operator and its mid-run mandate replacement (simulation.workload), in every
# seed instead of a third of them.
HOLDS, REPLACE = "holds", "replace"
TASKS = "tasks"  # calls presented with a harness-signed task (simulation.workload), in every seed, not half
PAYOUTS = "payouts"  # RazorpayX payouts (simulation.payouts) in every seed, not six in ten
WEBHOOKS = "webhooks"  # webhooks configured and delivered (simulation.webhooks) in every seed, not half
LIFECYCLE = "lifecycle"  # refunds failed and settlements reversed at the bank, in every seed, not half
ACCOUNT = "account"  # every mandate names its rail account (the deployment names its own), in every seed
UPSTREAM = "upstream"  # one shard's rail an upstream MCP server (proxy mode), in every seed, not a quarter
CROWD = "crowd"  # lists longer than a page (simulation.crowd), in every seed, not three in ten
CROWD_BURST = "crowd_burst"  # ... and the others' traffic packed into the first 12 s, not spread over 90
# Payouts in every seed, each payout agent's first two calls payouts racing past the gate against a balance that pays
# one of them, lists that do not lag (simulation.payouts): aimed at the admission's balance re-check.
PAYOUT_RACE = "payout_race"
PAYOUT_APPROVAL = "payout_approval"
FREE_TEXT = "free_text"  # payouts in every seed, their grants bounding the narration the agents send
PAYEE_HOLD = "payee_hold"  # payouts in every seed, their grants holding an unlisted payee for a person (ADR 0034)
NOTES = "notes"  # agents' own notes on their calls, some past what the rail leaves them, in every seed, not a quarter
# A shard's machine lost and the shard restored from its replica (simulation.machine_loss), in every seed instead
# of some; it displaces the merchant's move.
MACHINE_LOSS = "machine_loss"
# The workload's parts a focus may name.
PARTS = frozenset({MOVE, HOLDS, TASKS, REPLACE, PAYOUTS, WEBHOOKS, LIFECYCLE, ACCOUNT, UPSTREAM, CROWD, PAYOUT_RACE,
                   PAYOUT_APPROVAL, FREE_TEXT, PAYEE_HOLD, CROWD_BURST, NOTES})
FOCUS_KINDS = (*FAULT_KINDS, TWO_RECONCILERS, MOVE, RECONCILER_PAUSE, AMBIGUOUS_RETRIES, HOLDS, TASKS, REPLACE,
               PAYOUTS, WEBHOOKS, LIFECYCLE, ACCOUNT, UPSTREAM, CROWD, MACHINE_LOSS, SHORT_GRACE, PAYOUT_RACE,
               PAYOUT_APPROVAL, FREE_TEXT, PAYEE_HOLD, CROWD_BURST, NOTES)


# Scheduling steps a seed may take before it counts as never settling (STEP_BUDGET). Payouts, webhooks and the
# bank's lifecycle nearly doubled a busy seed's steps (9,249 of 12,000 in 40 seeds with all three on).
MAX_STEPS = 20_000


def run_seed(seed: int, *, max_steps: int = MAX_STEPS, keep: Path | None = None,
             disabled: frozenset[str] = frozenset(), focus: frozenset[str] = frozenset()) -> SeedResult:  # fmt: skip
    """One seed, start to finish; *keep* a directory to leave the ledger files in (for a replay's inspection).
    *focus* (FOCUS_KINDS) turns those fault kinds on, two reconcilers per shard, or the merchant's move, whatever the
    seed drew: the rest of the seed is the seed's own, and without a focus nothing changes."""
    unknown = focus - set(FOCUS_KINDS)
    if unknown:
        raise ValueError(f"unknown focus {sorted(unknown)}; known: {', '.join(FOCUS_KINDS)}")
    root = Path(tempfile.mkdtemp(prefix=f"sim{seed}-", dir=_tmp_dir()))
    sched = Scheduler(seed, start_ms=0, max_steps=max_steps)
    rng = sched.rng
    # Sometimes the run starts minutes before midnight, so settlements straddle a window and its grace.
    # Seconds before it too: the first calls are made before the boundary and their repeats after it.
    sched.clock.wall_offset_ms = START_MS - (rng.choice((2_000, 5_000, 10_000, 60_000, 600_000)) if rng.random() < 0.5
                                             else -3_600_000)  # fmt: skip
    faults = plan_faults(sched, disabled, focus)
    faults.skew_ms = plan_skew(seed, disabled, focus)  # its own generator: the seeds without skew are unchanged
    merchants, agents, actions = rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((2, 3, 4))
    concurrency, reconcilers = rng.choice((1, 4)), rng.choice((1, 2))
    world = World(sched, root, faults, shards=2, merchants_per_shard=merchants, agents_per_merchant=agents,
                  actions_per_agent=actions, concurrency=concurrency,
                  reconcilers=2 if TWO_RECONCILERS in focus else reconcilers)  # fmt: skip
    sched.before_resume = world.strike
    install_clocks(world, seed, faults.skew_ms, focus)
    # Holds, tasks, a replaced mandate, rail accounts, a merchant moved (simulation.workload).
    # A machine lost (simulation.machine_loss): never with the merchant's move, which a focus on the loss displaces.
    if MACHINE_LOSS in focus:
        disabled = disabled | {MOVE}
    loss = plan_loss(seed, disabled, focus, move=plan_workload(seed, disabled, focus & {MOVE}).move)
    extras = plan_workload(seed, disabled, focus & PARTS)
    install(world, extras)
    install_loss(world, loss, extras)
    try:
        with use_clock(sched.clock):
            world.start()
            start_operator(world, extras)
            sched.run(until=lambda: not world.pending, deadline_ms=FAULT_PHASE_MS)
            faults.calm()
            sched.note("faults stop")
            settle_until = sched.clock.mono_ms + SETTLE_MS
            sched.run(until=_settled(world, extras.replacements), deadline_ms=settle_until)
            settled = sched.counters.steps < sched.max_steps
            written = write_times(sched)
            evidence = [ShardEvidence(s.name, s.ledger_path, s.rail.journal, s.rail.payment_amounts(),
                                      s.rail.deliveries, s.settings.rail_timeout_ms, written.of(s.ledger_path),
                                      s.settings.settlement_window_grace_ms)
                        for s in world.shards.values()]  # fmt: skip
            mandates = {a: m.model_dump(mode="json") for a, m in world.mandates.items()}
            violations = checker.check(evidence, world.actions, world.answers, mandates, settled=settled,
                                       stopped=frozenset(sched.stopped), set_back_ms=sched.clock.set_back_ms,
                                       calls=world.received)  # fmt: skip
            workload = {**extras.evidence(),
                        "payout_refusals": {s.name: list(s.rail.balance_refusals) for s in world.shards.values()},
                        "notes_refusals": {s.name: list(s.rail.notes_refusals) for s in world.shards.values()}}
            violations += checker.check_workload(evidence, world.actions, world.answers, mandates, workload)
            if not settled:
                violations.append(Violation("STEP_BUDGET", f"{max_steps} steps spent before the run settled"))
            edges = Counter(edge for shard in world.shards.values() for edge in _edges(shard.ledger_path))
    finally:
        sched.close()
        if keep is not None:
            shutil.copytree(root, keep, dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
    return SeedResult(seed, sched.trace_hash, sched.counters.steps, world.money_calls, Counter(sched.counters.faults),
                      violations, sched.clock.mono_ms, list(sched.trace_tail), edges,
                      Counter(extras.operator))  # fmt: skip


EVIDENCE_WAIT_MS = 60_000  # longer than any pause or outage: a live worker has written its answers by then


def _settled(world: World, replacements: list[dict[str, Any]] | None = None) -> Callable[[], bool]:
    """True once every agent has its definite answers and every intent is definite, and every rail answer a live
    worker was given is written — or EVIDENCE_WAIT_MS after the rest was, for the checker to name the answer that
    never was (EVIDENCE_KEPT). The ledgers are read at most once a simulated second."""
    last = [-1]
    definite_since: list[int | None] = [None]

    def settled() -> bool:
        now = world.sched.clock.mono_ms
        if world.pending or now - last[0] < 1_000:
            return False
        last[0] = now
        if not _definite(world) or not _payouts_followed(world) or not _withdrawn(world, replacements or []):
            definite_since[0] = None
            return False
        since = definite_since[0] = now if definite_since[0] is None else definite_since[0]
        return _answers_written(world) or now - since >= EVIDENCE_WAIT_MS

    return settled


def _definite(world: World) -> bool:
    """Every intent of every shard definite (read with plain SQL, like the checker)."""
    for shard in world.shards.values():
        conn = sqlite3.connect(f"file:{shard.ledger_path}?mode=ro", uri=True)
        try:
            open_rows = conn.execute(
                "SELECT COUNT(*) FROM intents WHERE state NOT IN "
                "('APPLIED', 'BLOCKED', 'FAILED_TERMINAL', 'CONFIRMED_NOT_APPLIED', 'QUARANTINED')"
            ).fetchone()[0]
        finally:
            conn.close()
        if open_rows:
            return False
    return True


FOLLOW_WAIT_MS = 600_000  # the lifecycle follower's polls double from 5 s: by then it has read every payout twice


def _payouts_followed(world: World) -> bool:
    """Every entity the bank has finished with: the ones whose money did not reach its payee (a refund failed, a
    settlement reversed, a payout failed, reversed or cancelled) raised to a person in the ledger, or FOLLOW_WAIT_MS
    gone since, for the checker to name the one never raised (RAISED); and no payout still queued under a mandate its
    shard has replaced, or FOLLOW_WAIT_MS gone since it was queued, for the checker to name the one never withdrawn
    (WITHDRAWN) — the replacement's rollout restarts the reconciler, whose withdrawal cancels it, seconds after
    everything else may be definite."""
    now = world.sched.clock.mono_ms
    for shard in world.shards.values():
        payouts = [e for e in shard.rail.journal if e.statuses]
        if not payouts:
            continue
        conn = sqlite3.connect(f"file:{shard.ledger_path}?mode=ro", uri=True)
        try:
            raised = {sik for (sik,) in conn.execute("SELECT sik FROM rail_status WHERE attention IS NOT NULL")}
            replaced = {sik for sik, agent, mandate_hash in conn.execute(
                "SELECT sik, agent_id, mandate_hash FROM intents WHERE tool = 'create_payout'")
                if shard.mandates.hash_of(agent) != mandate_hash}  # fmt: skip
        finally:
            conn.close()
        for e in payouts:
            at, status = e.statuses[-1]
            if status in ("processing", "pending", "created") or status in checker.NOT_PAID.get(e.kind, ()) and (
                    e.stamp not in raised and now - at < FOLLOW_WAIT_MS):  # fmt: skip
                return False
            if status == "queued" and e.stamp in replaced and now - at < FOLLOW_WAIT_MS:
                return False
    return True


def _withdrawn(world: World, replacements: list[dict[str, Any]]) -> bool:
    """No payout sent under a mandate replaced since waits queued on the rail for the reconciler's withdrawal to
    cancel it — or FOLLOW_WAIT_MS gone since the replacement, for the checker to name the one never withdrawn
    (WITHDRAWN). Without this the run could be judged before the reconciler's next step."""
    now = world.sched.clock.mono_ms
    for r in replacements:
        effective = r.get("effective_mono_ms")
        shard = world.shards.get(r["shard"])
        if effective is None or shard is None or now - effective >= FOLLOW_WAIT_MS:
            continue
        queued = {e.stamp for e in shard.rail.journal
                  if e.kind == "payout" and e.sent_mono_ms < effective and e.statuses[-1][1] == "queued"}  # fmt: skip
        if not queued:
            continue
        conn = sqlite3.connect(f"file:{shard.ledger_path}?mode=ro", uri=True)
        try:
            agents = dict(conn.execute("SELECT sik, agent_id FROM intents WHERE tool = 'create_payout' "
                                       "AND state <> 'QUARANTINED'").fetchall())  # fmt: skip
            raised = {sik for (sik,) in conn.execute("SELECT sik FROM rail_status WHERE attention IS NOT NULL")}
        finally:
            conn.close()
        if any(agents.get(stamp or "") == r["agent"] and stamp not in raised for stamp in queued):
            return False
    return True


def _answers_written(world: World) -> bool:
    """Every stamped answer a live worker was given is on its attempt row: one still paused, or retrying a failed
    write, holds it in memory until then."""
    for shard in world.shards.values():
        conn = sqlite3.connect(f"file:{shard.ledger_path}?mode=ro", uri=True)
        try:
            kept = set(conn.execute("SELECT sik, rail_entity_id FROM intent_attempts WHERE rail_entity_id IS NOT NULL"))
        finally:
            conn.close()
        if any((stamp, entity_id) not in kept for stamp, entity_id, process, incarnation in shard.rail.deliveries
               if (process, incarnation) not in world.sched.stopped):  # fmt: skip
            return False
    return True


def _edges(path: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT payload_json FROM audit_log WHERE kind = 'TRANSITION'").fetchall()
    finally:
        conn.close()
    out = []
    for (payload_json,) in rows:
        p = json.loads(payload_json)
        out.append(f"{p['from']} -{p['event']}-> {p['to']}")
    return out


def _tmp_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def quiet_logs() -> None:
    """The actors log every fault they meet; thousands of seeds would print millions of lines."""
    logging.disable(logging.CRITICAL)
