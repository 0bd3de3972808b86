"""One simulated deployment, built from a seed: shards, merchants, agents, the actors of every shard, and the
fault plan that strikes them.

Each shard is what `interlock up` runs for it — a gate worker, a rail worker with a standby, a reconciler —
over its own real SQLite ledger, its own simulated Redis and the rail account its key reaches. The actors run
the production functions (the gate job, `boot`, the Dispatcher, `begin_attempt`/`complete`, the heartbeat's
beat, the reconciler's sweep); this module only plays the part RQ, supervisord and the OS play: it takes jobs off
queues, restarts what died, and owns the threads' schedule. The agents stand for MCP clients and the ingress's
money-call path: they build the Proposal the ingress builds, enqueue it with the ingress's own function, wait
for the Outcome the ingress waits for, and follow `caller_action` as an agent must.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import redis

from gate_workers.jobs import GateRuntime, judge_proposal
from ingress import results
from ingress.money import _enqueue
from interlock import outcomes
from interlock.arguments import parse_money_call
from interlock.config import Settings, load_settings
from interlock.errors import InvalidInput, LeaseHeld
from interlock.mandate import Mandate, MandateStore, validate_mandate
from interlock.messages import CallerAction, Decision, Proposal
from interlock.queues import ADMIT_JOB, EXECUTE_JOB, GATE_JOB, gates_queue, rail_queue, reconcile_hint_key
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY
from interlock.tools import current_pins
from ledger.db import open_ledger
from rail_worker.dispatch import Dispatcher
from rail_worker.lease import Heartbeat, boot
from rail_worker.ownership import OwnershipFence
from rail_worker.runtime import RailRuntime
from rails.base import RAIL_MCP_UPSTREAM
from rails.upstream_manifest import ManifestCache
from reconciler.loop import Reconciler
from reconciler.withdrawal import PayoutWithdrawal
from reconciler.worker import (
    SWEEP_INTERVAL_S,
    _follow,
    _follower,
    _inbox_reader,
    _read_inbox,
    _wait_for_hints,
)
from simulation.clocks import step_clock
from simulation.ledger import WriteFaults, open_sim_ledger
from simulation.rail import FaultPlan, SimRail
from simulation.redis import QueueFaults, SimRedis
from simulation.scheduler import Killed, Process, Scheduler
from simulation.webhooks import SimWebhooks

logger = logging.getLogger(__name__)

DAY_MS = 86_400_000
REFUND, SETTLEMENT, PAYOUT = "create_refund", "create_instant_settlement", "create_payout"
DEFINITE_ACTIONS = frozenset({"DONE", "DO_NOT_RETRY", "ESCALATE_TO_OPERATOR"})
TIMINGS = {"rail_timeout_ms": 2_000, "lease_ttl_ms": 6_000, "reconcile_min_delay_ms": 1_000,
           "reconcile_max_passes": 8, "reconcile_max_age_ms": 300_000, "outcome_wait_ms": 4_000,
           "lifecycle_poll_ms": 5_000}  # fmt: skip


@dataclass
class Action:
    """One business action an agent wants done: the same action is repeated, never asked for twice."""

    agent: str
    merchant: str
    shard: str
    tool: str
    subject: str  # the payment id, or "balance"
    amount: int
    # The workload's extras (simulation.workload): the harness's signed task sent in `_meta`, and the simulated
    # instant (mono ms) before which the agent does not make this call.
    task: dict[str, Any] | None = None
    start_ms: int = 0
    # A payout's subject is its payee (the contact); each call names one of the contact's fund accounts, drawn
    # afresh ("the IMPS did not arrive, try their UPI id"): whichever it names, it is the same payout.
    fund_accounts: tuple[str, ...] = ()
    # The narration the agent sends with a payout (the `free_text` part of simulation.workload), on every call.
    narration: str | None = None
    notes: dict[str, str] | None = None  # ... and notes of its own


@dataclass
class Answer:
    action: Action
    request_id: str
    at_ms: int
    structured: dict[str, Any]  # the ingress's answer: the Outcome's structured body, or the error object
    shard: str  # the shard the ingress routed the call to (a moved merchant's calls change shard)


@dataclass
class Faults:
    """The seed's fault plan: which kinds strike and how often (swarm testing: each seed enables a subset)."""

    crash: float = 0.0  # per step, per crashable process
    pause: float = 0.0
    pause_ms: tuple[int, int] = (1_000, 15_000)
    # A reconciler paused as it begins a transaction — between its sweep's due list and the pass over one intent of
    # it — at this rate per strike, for a duration of about one call's deadline plus the reconcile delay (on only
    # when a search is aimed there: run_seed's focus RECONCILER_PAUSE).
    reconciler_pause: float = 0.0
    reconciler_pause_ms: tuple[int, int] = (200, 4_000)
    clock_step: float = 0.0
    skew_ms: int = 0  # each process on its own wall clock, no two more than this apart (simulation.clocks)
    partition: float = 0.0
    redis_flush: float = 0.0
    # A rail-worker outage (a stalled host, a long GC, a hung disk): from this simulated instant the shard's rail
    # workers stop for outage_ms; only one of them (the lease holder or its standby) unless outage_both.
    outage_at_ms: int | None = None
    outage_ms: int = 0
    outage_both: bool = True
    writes: WriteFaults = field(default_factory=WriteFaults)
    queues: QueueFaults = field(default_factory=QueueFaults)
    rail: FaultPlan = field(default_factory=FaultPlan)

    def calm(self) -> None:
        """Faults stop (the liveness phase): what is paused, partitioned or dead comes back by itself."""
        self.crash = self.pause = self.clock_step = self.partition = self.redis_flush = self.reconciler_pause = 0.0
        self.writes.begin_busy = self.writes.commit_error = 0.0
        q = self.queues
        q.lose = q.duplicate = q.delay = q.reorder = 0.0
        self.rail.money = {"ok": 1.0}
        self.rail.read_error = 0.0


@dataclass
class Shard:
    name: str
    settings: Settings
    redis: SimRedis
    rail: SimRail
    mandates: MandateStore
    merchants: list[str]
    ledger_path: Path


class SimPool(Executor):
    """The rail worker's call pool: each submitted call runs as an actor of the worker's own process."""

    def __init__(self, sched: Scheduler, process: Process, name: str) -> None:
        self.sched, self.process, self.name = sched, process, name
        self.live = 0
        self._n = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self._n += 1
        self.live += 1

        def run() -> None:
            try:
                fn(*args, **kwargs)
            finally:
                self.live -= 1

        self.sched.spawn(f"{self.name}.call{self._n}", self.process, run)
        return Future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if wait:
            self.sched.wait(lambda: self.live == 0, None)


class World:
    def __init__(self, sched: Scheduler, root: Path, faults: Faults, *, shards: int, merchants_per_shard: int,
                 agents_per_merchant: int, actions_per_agent: int, concurrency: int,
                 reconcilers: int = 1) -> None:  # fmt: skip
        self.sched = sched
        self.reconcilers = reconcilers
        self.root = root
        self.faults = faults
        self.concurrency = concurrency
        self.shards: dict[str, Shard] = {}
        self.answers: list[Answer] = []
        self.received: dict[str, tuple[int, int, int]] = {}  # request id -> true, shared and ingress clocks then
        self.actions: list[Action] = []
        self.pending: set[int] = set()  # actions whose agent has not had a definite answer yet
        # The ingress's routing where it differs from each action's first shard: a merchant the shard map moved
        # (simulation.shard_move), once the ingress has loaded the new map.
        self.routing: dict[str, str] = {}
        self.money_calls = 0
        self.webhooks: dict[str, SimWebhooks] = {}  # shard -> its rail's webhooks, when the seed configures them
        self.payments: dict[str, int] = {}
        self.mandates: dict[str, Mandate] = {}
        rng = sched.rng
        amounts = iter(rng.sample(range(1, 5_000), 4_000))  # each action's amount is its own: one signature each
        for s in range(shards):
            name = f"s{s}"
            path = root / f"ledger-{name}.sqlite3"
            settings = load_settings(ledger=path, shard=name, rail_concurrency=concurrency, **TIMINGS)
            client = SimRedis(sched, name, faults.queues)
            faults.rail.call_timeout_ms = settings.rail_timeout_ms
            faults.rail.list_delay_ms = settings.reconcile_min_delay_ms
            rail = SimRail(sched, f"acct_{name}", faults.rail, balance=50_000_000, account_number=account_number(s))
            merchants = [f"acc_M{s}{m}" for m in range(merchants_per_shard)]
            store: dict[str, Mandate] = {}
            for merchant in merchants:
                for a in range(agents_per_merchant):
                    agent = f"agent_{merchant[-2:]}{a}"
                    store[agent] = self.mandates[agent] = make_mandate(merchant, agent)
                    for _ in range(actions_per_agent):
                        tool = REFUND if rng.random() < 0.55 else SETTLEMENT
                        amount = 100 * next(amounts) + rng.randrange(100)
                        subject = "balance"
                        if tool == REFUND:
                            subject = f"pay_{merchant[-2:]}{len(self.payments):06d}"
                            rail.add_payment(subject, amount + rng.choice((0, 0, 500, 50_000)))
                            self.payments[subject] = amount
                        self.actions.append(Action(agent, merchant, name, tool, subject, amount))
            open_ledger(path).close()  # created as the rail worker's first start creates it, before anyone reads it
            self.shards[name] = Shard(name, settings, client, rail, MandateStore(store), merchants, path)
        self.pending = set(range(len(self.actions)))

    def add_action(self, agent: str, merchant: str, tool: str, *, amount: int | None = None,
                   shard: Shard | None = None) -> Action:  # fmt: skip
        """One more business action for *agent*, on *shard* (its merchant's), with an amount no other action has
        (the checker tells actions apart by tool, subject and amount); a refund gets a payment of its own."""
        shard = shard or next(s for s in self.shards.values() if merchant in s.merchants)
        used = {a.amount for a in self.actions}
        rng = self.sched.rng
        while amount is None or amount in used:
            amount = 100 * rng.randrange(1, 4_000) + rng.randrange(100) if amount is None else amount + 1
        subject = "balance"
        if tool == REFUND:
            subject = f"pay_{merchant[-2:]}{len(self.payments):06d}"
            shard.rail.add_payment(subject, amount + rng.choice((0, 500, 50_000)))
            self.payments[subject] = amount
        action = Action(agent, merchant, shard.name, tool, subject, amount)
        self.actions.append(action)
        return action

    # -- processes -------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.faults.outage_at_ms is not None:
            self.sched.at(self.faults.outage_at_ms, self._outage)
        for shard in self.shards.values():
            self._rail_worker(shard, "rail-a")
            self._rail_worker(shard, "rail-b")  # the standby: takes over once the lease is stale
            self._gate_worker(shard, "gate-a")
            self._gate_worker(shard, "gate-b")  # racing gate workers: the admission's re-checks are what holds
            for name in ("reconciler", "reconciler-b")[: self.reconcilers]:
                self._reconciler(shard, name)  # a second one races the first: each counts by its own clock
            hooks = self.webhooks.get(shard.name)
            if hooks is not None:
                self._supervised(f"webhooks:{shard.name}", hooks.serve)
        for agent in sorted({a.agent for a in self.actions}):
            mine = [i for i, a in enumerate(self.actions) if a.agent == agent]
            proc = self.sched.process(f"agent:{agent}", crashable=False)
            # An agent makes up to two tool calls at once (models do call tools in parallel): its own calls race.
            for lane in range(2):
                self.sched.spawn(f"agent:{agent}.{lane}", proc, lambda mine=mine[lane::2]: self._agent(mine))  # type: ignore[misc]

    def _supervised(self, name: str, body: Callable[[Process], None], restart_after_ms: int = 1_500) -> Process:
        proc = self.sched.process(name, restart_after_ms=restart_after_ms)

        def launch() -> None:
            def main() -> None:
                try:
                    body(proc)
                except Exception:  # noqa: BLE001 - the process dies of it, and supervisord starts it again
                    logger.exception("%s died", name)
                    self.sched.counters.fault("actor_died")
                finally:
                    # The process exited (its lease was lost): supervisord starts it again.
                    if not proc.dead:
                        self.sched.at(self.sched.clock.mono_ms, lambda: self.sched.crash(proc, fault=False))

            self.sched.spawn(f"{name}#{proc.incarnation}", proc, main)

        proc.restart = launch
        launch()
        return proc

    def _gate_worker(self, shard: Shard, name: str) -> None:
        def body(proc: Process) -> None:
            # Proxy mode: G6 judges the upstream's manifest, as GateRuntime.from_settings arranges it.
            upstream = (ManifestCache(shard.rail, ttl_ms=shard.settings.upstream_manifest_ttl_ms)
                        if shard.settings.rail == RAIL_MCP_UPSTREAM else None)  # fmt: skip
            rt = GateRuntime(settings=shard.settings, mandates=shard.mandates, rail=shard.rail,
                             ledger=self._ledger(shard, proc, readonly=True), redis=shard.redis,  # type: ignore[arg-type]
                             tool_hashes=current_pins(), upstream=upstream,
                             rail_queues={shard.name: shard.redis.queue(rail_queue(shard.name))})  # fmt: skip
            queue = shard.redis.queue(gates_queue(shard.name))
            while True:
                job = self._take(shard, queue)
                if job is None or job.func != GATE_JOB:
                    continue
                try:
                    judge_proposal(rt, job.args[0])
                except (Exception, redis.RedisError):  # RQ marks the job failed; the agent's repeat is judged afresh
                    logger.exception("gate job failed")

        self._supervised(f"{name}:{shard.name}", body)

    def _rail_worker(self, shard: Shard, name: str) -> None:
        def body(proc: Process) -> None:
            owner = f"{name}:{shard.name}:{proc.incarnation}"
            rt = RailRuntime(settings=shard.settings, ledger_path=shard.ledger_path,
                             ledger=self._ledger(shard, proc), mandates=shard.mandates, rail=shard.rail,
                             redis=shard.redis, owner=owner, fence=OwnershipFence(shard.name))  # type: ignore[arg-type]  # fmt: skip
            while True:
                try:
                    stranded = boot(rt)
                    break
                except LeaseHeld:
                    self.sched.sleep(shard.settings.lease_ttl_ms // 2)  # boot verifies the whole chain each try
                except Exception:  # noqa: BLE001 - a failed boot write: the process exits and is restarted
                    logger.exception("rail worker boot failed")
                    return
            pool = SimPool(self.sched, proc, f"{name}:{shard.name}")
            dispatcher = Dispatcher(rt, self.concurrency, pool=pool)
            heartbeat = Heartbeat(rt)
            hb_conn = self._ledger(shard, proc)

            def beat() -> None:
                while not rt.lease_lost.is_set():
                    self.sched.sleep(shard.settings.lease_ttl_ms // 3)
                    if not heartbeat.beat(hb_conn):
                        return

            self.sched.spawn(f"{owner}.heartbeat", proc, beat)
            for merchant_id, sik in stranded:
                # A call slot first, as the job loop below waits for one: the Dispatcher's semaphore would block
                # the one OS thread every actor runs on.
                self.sched.wait(lambda: pool.live < self.concurrency, None)
                self._run_job(lambda: dispatcher.execute(merchant_id, sik, None))  # noqa: B023
            queue = shard.redis.queue(rail_queue(shard.name))
            while not rt.lease_lost.is_set():
                if pool.live >= self.concurrency:
                    self.sched.wait(lambda: pool.live < self.concurrency or rt.lease_lost.is_set(), None)
                    continue
                job = self._take(shard, queue, timeout_ms=shard.settings.lease_ttl_ms // 3)
                if job is None:
                    continue
                if job.func == ADMIT_JOB:
                    decision = Decision.from_json(job.args[0])
                    self._run_job(lambda: dispatcher.handle_decision(decision))  # noqa: B023
                elif job.func == EXECUTE_JOB:
                    args = job.args
                    self._run_job(lambda: dispatcher.execute(*args))  # noqa: B023
            dispatcher.drain()  # the lease is lost: calls already out are recorded (fenced), then the process exits

        self._supervised(f"{name}:{shard.name}", body)

    def _run_job(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Killed:
            raise
        except Exception:  # noqa: BLE001 - a failed job: RQ keeps it as failed, the ledger keeps the truth
            logger.exception("rail job failed")

    def _reconciler(self, shard: Shard, name: str = "reconciler") -> None:
        def body(proc: Process) -> None:
            rec = Reconciler(settings=shard.settings, ledger=self._ledger(shard, proc), rail=shard.rail,
                             redis=shard.redis, owner=f"{name}:{shard.name}:{proc.incarnation}",  # type: ignore[arg-type]
                             mandates=shard.mandates, rail_jobs=shard.redis.queue(rail_queue(shard.name)))  # fmt: skip
            # What the reconciler process runs beside each sweep (reconciler.worker): the lifecycle after APPLIED,
            # and the cancelling of queued payouts whose mandate was withdrawn.
            reader = _inbox_reader(shard.settings, rec)  # the webhook inbox, when the seed configures webhooks
            if reader is not None:
                proc.on_crash.append(reader.inbox.close)
            follower = _follower(shard.settings, rec, shard.rail, reader)  # type: ignore[arg-type]
            withdrawal = PayoutWithdrawal(ledger=rec.ledger, rail=shard.rail, mandates=shard.mandates,
                                          owner=rec.owner)  # fmt: skip
            while True:
                if reader is not None:
                    _read_inbox(reader)
                try:
                    rec.sweep()
                except Exception:  # noqa: BLE001 - the loop goes on; the next sweep finds the same rows
                    logger.exception("sweep failed")
                _follow(follower)
                _follow(withdrawal)
                wait = SWEEP_INTERVAL_S * 4
                hooks = self.webhooks.get(shard.name)
                if reader is not None and hooks is not None:
                    # Production polls the inbox every WEBHOOK_POLL_S; here the reader wakes as soon as the receiver
                    # stores an event (or a hint comes), which is the same ordering without a wake-up every 0.1 s.
                    stored, hint = hooks.stored, reconcile_hint_key(shard.name)
                    self.sched.wait(lambda: hooks.stored != stored or bool(shard.redis.lists.get(hint)),  # noqa: B023
                                    int(wait * 1000))  # fmt: skip
                    wait = 0.0
                try:
                    _wait_for_hints(shard.redis, shard.name, wait)  # type: ignore[arg-type]
                except redis.RedisError:
                    self.sched.sleep(int(SWEEP_INTERVAL_S * 1000))

        self._supervised(f"{name}:{shard.name}", body)

    def _ledger(self, shard: Shard, proc: Process, *, readonly: bool = False) -> sqlite3.Connection:
        return open_sim_ledger(shard.ledger_path, self.sched, proc, self.faults.writes, readonly=readonly)

    def _take(self, shard: Shard, queue: Any, timeout_ms: int | None = None) -> Any:
        try:
            return queue.take(timeout_ms)
        except redis.RedisError:
            self.sched.sleep(500)
            return None

    # -- agents ----------------------------------------------------------------------------------------------

    def _agent(self, mine: list[int]) -> None:
        for index in mine:
            action = self.actions[index]
            if action.start_ms > self.sched.clock.mono_ms:
                self.sched.sleep(action.start_ms - self.sched.clock.mono_ms)
            for _ in range(200):
                answer = self.call(action)
                done = answer.get("caller_action") in DEFINITE_ACTIONS
                if done:
                    break
                if answer.get("caller_action") == "WAIT_FOR_APPROVAL":  # a held call: a person decides in minutes
                    self.sched.sleep(self.sched.rng.randint(5_000, 15_000))
                    continue
                self.sched.sleep(self.sched.rng.randint(200, 3_000))
            self.pending.discard(index)

    def call(self, action: Action) -> dict[str, Any]:
        """One money call through the ingress's path: validate, enqueue the Proposal, wait for the Outcome."""
        shard = self.shards[self.routing.get(action.merchant, action.shard)]
        arguments: dict[str, Any] = {"amount": action.amount}
        if action.tool == REFUND:
            arguments["payment_id"] = action.subject
        elif action.tool == PAYOUT:
            fund_account = self.sched.rng.choice(action.fund_accounts)
            upi = shard.rail.fund_accounts[fund_account]["account_type"] == "vpa"
            arguments.update(fund_account_id=fund_account, currency="INR", mode="UPI" if upi else "IMPS",
                             purpose="vendor bill")  # fmt: skip
            if action.narration is not None:
                arguments["narration"] = action.narration
        if action.notes is not None:
            arguments["notes"] = dict(action.notes)
        request_id = f"req{self.sched.rng.getrandbits(64):016x}"
        try:
            parse_money_call(action.tool, arguments)
        except InvalidInput as exc:  # refused at the ingress, as ingress.money does, before anything is recorded
            refused = results.error_body(results.invalid_input(exc)) or {}
            self.answers.append(Answer(action, request_id, self.sched.clock.now_ms(), refused, shard.name))
            return refused
        meta = action.task or {}
        proposal = Proposal(request_id=request_id, agent_id=action.agent, merchant_id=action.merchant, tool=action.tool,
                            arguments=arguments, received_at_ms=self.sched.clock.now_ms(),
                            task=meta.get(TASK_META_KEY), task_sig=meta.get(TASK_SIG_META_KEY))  # fmt: skip
        self.money_calls += 1
        clock = self.sched.clock
        self.received[request_id] = (clock.true_ms(), clock.wall_ms(None), proposal.received_at_ms)
        route = SimpleNamespace(queue_redis=shard.redis, gates_queue=lambda: shard.redis.queue(gates_queue(shard.name)))
        structured: dict[str, Any]
        try:
            _enqueue(route, proposal)  # type: ignore[arg-type]
            outcome = outcomes.wait(shard.redis, request_id, shard.settings.outcome_wait_ms)  # type: ignore[arg-type]
            result = results.money_outcome(outcome.structured()) if outcome else results.in_progress()
            structured = dict(result.structured_content or {})
        except redis.RedisError:
            error = results.error("QUEUE_UNAVAILABLE", "queue unreachable", CallerAction.RETRY_SAME_CALL)
            structured = results.error_body(error) or {}
        self.answers.append(Answer(action, request_id, self.sched.clock.now_ms(), structured, shard.name))
        return structured

    # -- faults ----------------------------------------------------------------------------------------------

    def _outage(self) -> None:
        f, sched = self.faults, self.sched
        for shard in self.shards.values():
            for name in ("rail-a", "rail-b") if f.outage_both else (sched.rng.choice(("rail-a", "rail-b")),):
                proc = sched.processes.get(f"{name}:{shard.name}")
                if proc is not None and not proc.dead:
                    proc.paused_until = max(proc.paused_until or 0, sched.clock.mono_ms + f.outage_ms)
                    sched.counters.fault("rail_outage")
                    sched.note(f"outage {proc.name} {f.outage_ms}")

    def strike(self, actor: Any) -> None:
        """Before an actor resumes: maybe crash or pause its process, step the clock, cut a link, lose Redis."""
        f, rng, sched = self.faults, self.sched.rng, self.sched
        proc = actor.process
        if not proc.crashable:
            return
        roll = rng.random()
        # A pause matters most between a money call's IN_FLIGHT commit and its first byte: struck there more often.
        pause, pause_ms = f.pause * (8 if actor.last_point.endswith(".send") else 1), f.pause_ms
        if f.reconciler_pause and proc.name.startswith("reconciler") and actor.last_point == "ledger.begin":
            pause, pause_ms = max(pause, f.reconciler_pause), f.reconciler_pause_ms
        if roll < f.crash:
            sched.crash(proc)
        elif roll < f.crash + pause:
            sched.pause(proc, rng.randint(*pause_ms))
        elif roll < f.crash + pause + f.partition:
            shard = self.shards[proc.name.rsplit(":", 1)[-1]]
            until = sched.clock.mono_ms + rng.randint(500, 10_000)
            (shard.redis if rng.random() < 0.5 else shard.rail).partition(proc.name, until)
            sched.counters.fault("partition")
            sched.note(f"partition {proc.name}")
        elif roll < f.crash + pause + f.partition + f.clock_step:
            step = rng.choice((1_000, 5_000, 30_000, -1_000, -30_000))  # NTP sets clocks either way
            step_clock(sched, proc.name, step)  # every process's clock, or (skewed clocks) this one's alone
        elif roll < f.crash + pause + f.partition + f.clock_step + f.redis_flush:
            self.shards[proc.name.rsplit(":", 1)[-1]].redis.flush()


def account_number(shard: int) -> str:
    """The RazorpayX account shard *shard*'s payouts are made from."""
    return f"7878780{shard:09d}"


def make_mandate(merchant: str, agent: str) -> Mandate:
    pins = current_pins()
    data = {
        "v": 1, "mandate_id": f"mnd_{agent}", "merchant_id": merchant, "agent_id": agent,
        "issued_at": 1_700_000_000_000, "expires_at": 2_100_000_000_000, "purpose": "simulated agent",
        "scope": {"grants": {
            "fetch_payment": {"reversibility": "reversible"},
            "create_refund": {"reversibility": "irreversible",
                              "value": {"min_amount_minor": 100, "max_amount_minor": 400_000, "currencies": ["INR"]}},
            "create_instant_settlement": {"reversibility": "irreversible",
                                          "value": {"min_amount_minor": 100, "max_amount_minor": 400_000,
                                                    "currencies": ["INR"]}},
        }},
        "limits": {"windows": [{"window_ms": DAY_MS, "max_calls": 12, "max_amount_minor": 900_000, "currency": "INR"}],
                   "fee_budgets": {"INR": {"window_ms": DAY_MS, "max_fee_minor": 2_500}}},
        "idempotency": {"create_instant_settlement": {"window_ms": DAY_MS}},
        "approval": {"approvers": ["ops@example.com"], "hold_above_minor": None, "hold_expiry_ms": DAY_MS},
        "provenance": {"server_id": "interlock-rest",
                       "pinned_manifests": {t: {"sha256": pins[t]} for t in ("fetch_payment", REFUND, SETTLEMENT,
                                                                             PAYOUT)}},
    }  # fmt: skip
    return validate_mandate(json.loads(json.dumps(data)), source=f"simulated mandate of {agent}")
