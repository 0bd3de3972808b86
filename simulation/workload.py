"""The seed's workload beyond plain refunds and settlements (swarm-style: each seed turns some of it on).

* **holds** — one merchant's mandates hold every call above Rs 1,000 for a person and add a short window (two
  calls in 30 simulated seconds), and its agents' calls are spread over the first minutes, so the operator
  (simulation.operator) sometimes approves a hold after the window has filled up behind it (it must be refused);
* **tasks** — one agent's refunds carry a harness-signed task (audience: its merchant and itself, a ceiling below
  what it asks for in total), and a hostile agent of another merchant, whose mandate trusts the same signer,
  replays that task for its own refunds;
* **replace** — one agent's mandate is replaced mid-run by a new version with fewer calls and less money, often
  without the settlement grant, rolled out as production rolls it out: the file changes and every process of the
  shard restarts, one after another;
* **account** — every mandate names its rail account (INTERLOCK_RAIL_ACCOUNT_ID is set for each shard), and one
  extra agent's mandate names the other shard's account: each of its calls must be refused;
* **move** — a merchant is moved from s0 to s1 with `shards apply`'s code while its first calls are on their way
  (simulation.shard_move); never with **account**, as a moved merchant's payments must be reachable from both.

What the checker needs to judge these is kept here as plain data (`Workload.evidence`).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.mandate import Mandate, MandateStore, validate_mandate
from interlock.task import new_task, public_key_b64, sign_task
from simulation.crowd import install_crowd
from simulation.payouts import SHARE, install_payouts
from simulation.shard_move import install_move
from simulation.upstream import install_upstream
from simulation.webhooks import install_webhooks
from simulation.world import PAYOUT, REFUND, SETTLEMENT, World, make_mandate

SHORT_WINDOW_MS = 30_000
CROWD_MS = 90_000  # the others' refunds and settlements are spread over the fault phase
# ... or packed into the first seconds, while the agents' first calls are made and read (focus crowd_burst): a page of
# newer entities then stands before one of ours within a reconcile pass or two.
CROWD_BURST_MS = 12_000
HOLD_ABOVE_MINOR = 100_000
SIGNER = "harness"
TASK_EXPIRES_AT = 2_000_000_000_000


@dataclass
class Workload:
    rng: random.Random
    seed: int = 0
    holds: bool = False
    tasks: bool = False
    replace: bool = False
    account: bool = False
    move: bool = False
    payouts: bool = False
    payout_race: bool = False  # focus only: simulation.payouts
    payout_approval: bool = False  # focus only: every payout account has the approval workflow (simulation.payouts)
    free_text: bool = False  # payout grants bound the narration, and agents send some (simulation.payouts)
    payee_hold: bool = False  # payout grants hold an unlisted payee for a person (ADR 0034; simulation.payouts)
    webhooks: bool = False
    lifecycle: bool = False
    upstream_mcp: bool = False
    crowd: bool = False
    crowd_burst: bool = False  # focus only: the others' traffic packed into the first seconds (simulation.crowd)
    notes: bool = False  # agents send notes of their own, some past what the rail leaves them (NOTE_SHAPES)
    # Evidence for the checker, plain data.
    rejected: list[dict[str, str]] = field(default_factory=list)  # holds the operator rejected: shard, merchant, sik
    approved: list[dict[str, str]] = field(default_factory=list)
    task_data: dict[str, dict[str, Any]] = field(default_factory=dict)  # task_id -> signer, audience, ceilings
    replacements: list[dict[str, Any]] = field(default_factory=list)  # agent, shard, mandate, effective_mono_ms
    accounts: dict[str, str] = field(default_factory=dict)  # shard -> the rail account its key reaches
    moves: list[dict[str, Any]] = field(default_factory=list)  # merchant, source, target, applied_mono_ms
    operator: Counter[str] = field(default_factory=Counter)  # what the operator did, by outcome
    payees: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # agent -> contacts, fund_accounts it may pay
    queueing: dict[str, bool] = field(default_factory=dict)  # agent -> its mandate's queue_if_low_balance
    upstream: dict[str, str] = field(default_factory=dict)  # shard -> the upstream MCP server's profile (proxy mode)
    replacing: list[str] = field(default_factory=list)  # agents whose mandate is replaced during the run
    # A shard whose machine was lost and restored (simulation.machine_loss): when, and what the restore did.
    restores: list[dict[str, Any]] = field(default_factory=list)

    def evidence(self) -> dict[str, Any]:
        return {
            "rejected": list(self.rejected),
            "approved": list(self.approved),
            "tasks": dict(self.task_data),
            "replacements": list(self.replacements),
            "accounts": dict(self.accounts),
            "moves": list(self.moves),
            "payees": dict(self.payees),
            "queueing": dict(self.queueing),
            "restores": [dict(r) for r in self.restores],
        }


PARTS = ("holds", "tasks", "replace", "account", "move", "payouts", "free_text", "payee_hold", "webhooks", "lifecycle",
         "upstream", "crowd", "crowd_burst", "notes")


def plan_workload(seed: int, disabled: frozenset[str] = frozenset(), focus: frozenset[str] = frozenset()) -> Workload:
    """Which parts of the workload this seed runs; its own generator, so the fault plan's draws stay put.
    *focus* parts are on whatever the seed drew (the move then displaces the rail accounts)."""
    rng = random.Random(f"workload:{seed}")
    w = Workload(rng)
    w.holds = (rng.random() < 0.35 or "holds" in focus) and "holds" not in disabled
    w.tasks = (rng.random() < 0.5 or "tasks" in focus) and "tasks" not in disabled
    w.replace = (rng.random() < 0.4 or "replace" in focus) and "replace" not in disabled
    w.account = (rng.random() < 0.3 or "account" in focus) and "account" not in disabled
    # Drawn from a generator of its own, so that the seeds without a move run as they did before it existed.
    moved = random.Random(f"move:{seed}").random() < 0.25
    w.move = "move" not in disabled and "account" not in focus and ("move" in focus or moved and not w.account)
    w.account = w.account and not w.move
    # Its own generator too: the seeds without payouts run as they did before payouts were simulated.
    w.payouts = "payouts" not in disabled and ("payouts" in focus or "payout_race" in focus
                                               or "payout_approval" in focus or "free_text" in focus
                                               or "payee_hold" in focus
                                               or random.Random(f"payouts:{seed}").random() < SHARE)  # fmt: skip
    w.payout_race = w.payouts and "payout_race" in focus
    bounded = random.Random(f"free_text:{seed}").random() < 0.4
    w.free_text = w.payouts and "free_text" not in disabled and ("free_text" in focus or bounded)
    held = random.Random(f"payee_hold:{seed}").random() < 0.3
    w.payee_hold = w.payouts and "payee_hold" not in disabled and ("payee_hold" in focus or held)
    w.payout_approval = w.payouts and "payout_approval" in focus
    hooked = random.Random(f"webhooks:{seed}").random() < 0.5
    w.webhooks = "webhooks" not in disabled and ("webhooks" in focus or hooked)
    banked = random.Random(f"lifecycle:{seed}").random() < 0.5
    w.lifecycle = "lifecycle" not in disabled and ("lifecycle" in focus or banked)
    proxied = random.Random(f"upstream:{seed}").random() < 0.25
    # Not with a merchant moved between shards: a moved merchant's payments are reached from either shard's rail.
    w.upstream_mcp = "upstream" not in disabled and not w.move and ("upstream" in focus or proxied)
    crowded = random.Random(f"crowd:{seed}").random() < 0.3
    w.crowd = "crowd" not in disabled and ("crowd" in focus or "crowd_burst" in focus or crowded)
    w.crowd_burst = w.crowd and "crowd_burst" in focus
    noted = random.Random(f"notes:{seed}").random() < 0.25
    w.notes = "notes" not in disabled and ("notes" in focus or noted)
    w.seed = seed
    return w


def install(world: World, w: Workload) -> None:
    """Shape the world before it starts: mandates, extra agents and actions, and the mid-run replacement."""
    rng = w.rng
    merchants = {m: s.name for s in world.shards.values() for m in s.merchants}
    if w.payouts:
        install_payouts(world, w, w.seed)
    if w.webhooks:
        install_webhooks(world, w, w.seed)
    if w.upstream_mcp:
        install_upstream(world, w, w.seed)  # after the payouts: its agents' payouts are refused, as G2 refuses them
    if w.lifecycle:  # the bank's word after the rail accepted: refunds failed, settlements reversed
        bank = random.Random(f"lifecycle:{w.seed}")
        plan = world.faults.rail
        plan.bank_lifecycle = True
        plan.refund_failed, plan.settlement_reversed = bank.choice((0.1, 0.3)), bank.choice((0.1, 0.3))
    if w.account:
        for shard in world.shards.values():
            w.accounts[shard.name] = shard.rail.merchant_id
        for agent, mandate in list(world.mandates.items()):
            _set(
                world,
                agent,
                _edit(
                    mandate,
                    lambda d, a=w.accounts[merchants[mandate.merchant_id]]: (  # type: ignore[misc]
                        d.update(rail={**(d.get("rail") or {}), "account_id": a})
                    ),
                ),
            )
        # A mandate written for the other shard's account, given to an agent of this one: nothing may move.
        merchant = rng.choice(sorted(merchants))
        other = [a for s, a in w.accounts.items() if s != merchants[merchant]]
        agent = f"agent_{merchant[-2:]}x"
        _set(world, agent, _edit(make_mandate(merchant, agent), lambda d: d.update(rail={"account_id": other[0]})))
        for tool in (REFUND, SETTLEMENT):
            world.add_action(agent, merchant, tool)
    if w.holds:
        merchant = rng.choice(sorted(merchants))

        def hold(d: dict[str, Any]) -> None:
            d["approval"]["hold_above_minor"] = HOLD_ABOVE_MINOR
            d["limits"]["windows"].append({"window_ms": SHORT_WINDOW_MS, "max_calls": 2})

        for agent, mandate in list(world.mandates.items()):
            if mandate.merchant_id == merchant:
                _set(world, agent, _edit(mandate, hold))
                for _ in range(4):
                    world.add_action(agent, merchant, REFUND, amount=100 * rng.randrange(1_100, 3_900))
        for action in world.actions:
            if action.merchant == merchant:
                action.start_ms = rng.randrange(0, 45_000)
    if w.tasks:
        _tasks(world, w, merchants)
    if w.replace:
        candidates = sorted(a for a in world.mandates if not a.endswith(("x", "hostile")))
        settling = sorted({a.agent for a in world.actions if a.tool == SETTLEMENT} & set(candidates))
        paying = sorted(set(w.payees) & set(candidates))
        # One whose settlements a withdrawn grant stops, or (when payouts run, half the time) one whose payouts may
        # be waiting queued on the rail: the replacement withdraws them (always, with the payout_approval focus).
        agent = rng.choice(paying if paying and (rng.random() < 0.5 or w.payout_approval) else settling or candidates)
        at = rng.randrange(2_000, 20_000)  # while its calls are on their way
        world.sched.at(at, lambda: _roll_out(world, w, agent))
        w.replacing.append(agent)
    if w.move:
        install_move(world, w)  # last: no other part picks the moving merchant's agent
    if w.crowd:  # last: the payments it crowds are the refunds' own
        install_crowd(world, w.seed, CROWD_BURST_MS if w.crowd_burst else CROWD_MS)
    if w.notes:
        _notes(world, w.seed)
    world.pending = set(range(len(world.actions)))


# What agents write into `notes` (the `notes` part). Razorpay keeps 15 notes on an entity, each key and value at most
# 256 characters (SPEC §10), and Interlock writes three keys of its own on every money call, so an agent has 12:
# shapes within that and at its edge (NOTE_SHAPES), and past it each way (NOTES_PAST: one note too many, a reserved
# key, a key or a value one character too long). Those past it must be refused at the ingress (INVALID_INPUT),
# before anything is recorded, never by the rail.
NOTE_SHAPES: tuple[dict[str, str] | None, ...] = (
    None,
    {"memo": "ticket 4411"},
    {f"n{i:02d}": f"value {i}" for i in range(12)},
)
NOTES_PAST: tuple[dict[str, str], ...] = (
    {f"n{i:02d}": f"value {i}" for i in range(13)},
    {"interlock_sik": "S" * 32},
    {"interlock_agent": "someone else"},
    {"memo": "x" * 257},
    {"k" * 257: "v"},
)
PAST_PER_SEED = 3  # actions whose notes are past the limits: refused, so they move no money; the rest run as ever


def _notes(world: World, seed: int) -> None:
    """Notes for every action with none of its own (a bounded payout's drawn free-text notes stay), from a generator
    of its own: the rest of the seed stays as it was. PAST_PER_SEED of those actions get notes past the limits, and
    every other a shape within them, so the part costs the seed's other paths only those few calls."""
    rng = random.Random(f"notes:{seed}:shapes")
    bare = [action for action in world.actions if action.notes is None]
    past = set(rng.sample(range(len(bare)), min(PAST_PER_SEED, len(bare))))
    for index, action in enumerate(bare):
        shape = rng.choice(NOTES_PAST) if index in past else rng.choice(NOTE_SHAPES)
        action.notes = None if shape is None else dict(shape)


def _tasks(world: World, w: Workload, merchants: dict[str, str]) -> None:
    rng = w.rng
    agent = rng.choice(sorted(a for a in world.mandates if not a.endswith("x")))
    merchant = world.mandates[agent].merchant_id
    mine = [a for a in world.actions if a.agent == agent and a.tool == REFUND]
    while len(mine) < 3:
        mine.append(world.add_action(agent, merchant, REFUND))
    ceiling = max(100, sum(a.amount for a in mine) * 6 // 10)
    key = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
    task = new_task(f"task_{agent}", TASK_EXPIRES_AT, REFUND, merchant_id=merchant, agent_ids=[agent],
                    max_amount_minor=ceiling)  # fmt: skip
    meta = sign_task(task, key, SIGNER)
    w.task_data[task["task_id"]] = {"signer": SIGNER, "audience": task["audience"],
                                    "ceilings": {REFUND: ceiling}}  # fmt: skip
    trust = {SIGNER: public_key_b64(key)}
    _set(world, agent, _edit(world.mandates[agent], lambda d: d.update(task_signers=trust)))
    for action in mine:
        action.task = meta
    # The hostile agent: another merchant's, on the other shard when the seed says so (its ledger then counts
    # nothing of the task), whose mandate trusts the same harness.
    others = sorted(m for m in merchants if m != merchant)
    if not others:
        return
    far = [m for m in others if merchants[m] != merchants[merchant]]
    target = rng.choice(far if far and rng.random() < 0.6 else others)
    hostile = f"agent_{target[-2:]}hostile"
    base = make_mandate(target, hostile)
    if w.accounts:
        base = _edit(base, lambda d: d.update(rail={"account_id": w.accounts[merchants[target]]}))
    _set(world, hostile, _edit(base, lambda d: d.update(task_signers=trust)))
    for _ in range(2):
        world.add_action(hostile, target, REFUND).task = meta


def _roll_out(world: World, w: Workload, agent: str) -> None:
    """A new version of *agent*'s mandate: the file is replaced and every process of its shard restarts in turn,
    each loading the mandates afresh (as `MandateStore.from_settings` does at start)."""
    rng, sched = w.rng, world.sched
    old = world.mandates[agent]
    shard = next(s for s in world.shards.values() if old.merchant_id in s.merchants)
    withdraw = rng.random() < 0.7

    def lower(d: dict[str, Any]) -> None:
        d["mandate_id"] = f"{d['mandate_id']}_v2"
        day = d["limits"]["windows"][0]
        day["max_calls"], day["max_amount_minor"] = 3, 400_000
        if withdraw:
            del d["scope"]["grants"][SETTLEMENT]
            d["idempotency"].pop(SETTLEMENT, None)
            d["scope"]["grants"].pop(PAYOUT, None)
            d["idempotency"].pop(PAYOUT, None)

    new = _edit(old, lower)
    current = shard.mandates.as_dict()
    current[agent] = new
    shard.mandates = MandateStore(current, rail_account_id=shard.mandates.rail_account_id)
    sched.note(f"mandate of {agent} replaced: {new.mandate_id}{' (no settlements)' if withdraw else ''}")
    record: dict[str, Any] = {"agent": agent, "shard": shard.name, "mandate": new.model_dump(mode="json"),
                              "effective_mono_ms": None}  # fmt: skip
    w.replacements.append(record)
    # The rail workers first, then the reconciler and the gate workers: for a few seconds old gate workers still
    # decide under the old mandate, and only the admission's and the send's re-checks of G1 stand in the way.
    names = [f"{p}:{shard.name}" for p in ("rail-b", "rail-a", "reconciler", "reconciler-b", "gate-a", "gate-b")
             if f"{p}:{shard.name}" in sched.processes]  # fmt: skip
    at = sched.clock.mono_ms
    for i, name in enumerate(names):
        at += rng.randrange(0, 3_000) if i < 2 else rng.randrange(1_000, 6_000)
        last = i == 1

        def restart(name: str = name, last: bool = last) -> None:
            sched.crash(sched.processes[name], fault=False)
            if last:  # from here on no rail worker of the shard holds the old mandate (the true clock: the wall
                record["effective_mono_ms"] = sched.clock.mono_ms  # clock may be stepped back after this)

        sched.at(at, restart)


def _edit(mandate: Mandate, change: Any) -> Mandate:
    data = json.loads(json.dumps(mandate.model_dump(mode="json")))
    change(data)
    return validate_mandate(data, source=f"simulated mandate of {data['agent_id']}")


def _set(world: World, agent: str, mandate: Mandate) -> None:
    """Configure *mandate* for *agent* on its merchant's shard (with the account check when the seed names one)."""
    world.mandates[agent] = mandate
    for shard in world.shards.values():
        if mandate.merchant_id in shard.merchants:
            current = shard.mandates.as_dict()
            current[agent] = mandate
            account = shard.rail.merchant_id if mandate.rail.account_id is not None else None
            shard.mandates = MandateStore(current, rail_account_id=account or shard.mandates.rail_account_id)
