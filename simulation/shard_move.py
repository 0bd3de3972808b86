"""A merchant moved between shards while its first calls are on their way (SPEC §15, ADR 0014).

A seed in four (never with the rail-accounts part) deploys both shards under a shard map that names every
merchant, accepted by both ledgers as `interlock shards apply` records one, and adds a merchant, `acc_Mmv`, on
s0 whose one agent makes its calls together at a drawn moment. About then the operator moves it to s1 with the
production code of `shards apply`: `plan_moves` judges the move from both ledgers and from what both shards'
Redis hold for it, and `apply_ownership` re-checks the source ledger under the write locks and records the new
map in both. A refused move (an intent already admitted, a job queued) is tried again a little later, up to
three times. The ingress routes the merchant's calls to s1 only once it has loaded the new map, up to a few
seconds after the apply: until then they still reach s0.

What the simulated Redis can show is less than `shards apply` reads from a real one: a job a worker has taken
and not finished (RQ's started registry) is invisible here, so a Decision can still be between its gate worker
and s0's rail worker when the move is applied. The ledger fence (rail_worker.ownership) must refuse it there,
and the checker holds that it did: once the merchant has moved, s0's ledger never holds an intent of it.

Both shards reach the moved merchant's payments (a moved merchant is served by the same rail account from either
shard); each simulated rail knows only the entities created through it, and the checker judges each action and
each payment across both journals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interlock.clock import use_clock
from interlock.mandate import MandateStore
from interlock.queues import reconcile_hint_key
from interlock.shards import Shard as MapShard
from interlock.shards import ShardMap
from ops.shard_apply import apply_ownership
from ops.shard_queues import UNREADABLE, merchant_of_job
from ops.shards_cli import plan_moves
from simulation.world import REFUND, SETTLEMENT, Shard, World, make_mandate

MOVER = "acc_Mmv"
SOURCE, TARGET = "s0", "s1"
MOVE_TRIES = 3


def install_move(world: World, w: Any) -> None:
    """Deploy under a map, add the merchant that moves, and schedule the operator's move."""
    rng, sched = w.rng, world.sched
    source, target = world.shards[SOURCE], world.shards[TARGET]
    owners = {m: s.name for s in world.shards.values() for m in s.merchants}
    current = _map(world, {**owners, MOVER: SOURCE}, epoch=1)
    with use_clock(sched.clock):  # installed before the run's clock is in use: the record must carry the sim's time
        problems = apply_ownership(_map(world, {}, epoch=0), current, [])
    assert not problems, problems  # nothing can be in the way before the run starts
    agent = f"agent_{MOVER[-2:]}0"
    mandate = make_mandate(MOVER, agent)
    world.mandates[agent] = mandate
    for shard in (source, target):  # both shards' mandate files carry it: either may serve the merchant
        current_store = shard.mandates.as_dict()
        current_store[agent] = mandate
        shard.mandates = MandateStore(current_store, rail_account_id=shard.mandates.rail_account_id)
    start = rng.randrange(2_000, 30_000)
    for tool in rng.sample((REFUND, REFUND, SETTLEMENT), rng.choice((2, 3))):
        action = world.add_action(agent, MOVER, tool, shard=source)
        action.start_ms = start + rng.randrange(0, 300)
        if tool == REFUND:
            target.rail.add_payment(action.subject, source.rail.payment_amounts()[action.subject])
    new = _map(world, {**owners, MOVER: TARGET}, epoch=2)
    record: dict[str, Any] = {"merchant": MOVER, "source": SOURCE, "target": TARGET, "applied_mono_ms": None}
    w.moves.append(record)
    # Half the time while the first calls are being judged (a gate worker that checked the route before the move
    # may enqueue its Decision after it), else anywhere from a little before they start to a little after.
    at = start + (rng.randrange(0, 600) if rng.random() < 0.5 else rng.randrange(-1_500, 2_500))
    sched.at(max(500, at), lambda: _try_move(world, w, current, new, record, 1))


def _try_move(world: World, w: Any, current: ShardMap, new: ShardMap, record: dict[str, Any], attempt: int) -> None:
    """`interlock shards apply NEW_MAP`: the plan, then the apply; refused, it is tried again a little later."""
    sched = world.sched
    in_redis = {name: held_for(shard) for name, shard in world.shards.items()}
    moves = plan_moves(current, new, in_redis)
    problems = [m.refusal for m in moves if m.refusal is not None] or apply_ownership(
        current, new, [(m.merchant_id, m.source) for m in moves])
    if problems:
        w.operator["move refused"] += 1
        sched.note(f"move of {MOVER} refused: {problems[0][:80]}")
        if attempt < MOVE_TRIES:
            sched.at(sched.clock.mono_ms + w.rng.randrange(1_000, 4_000),
                     lambda: _try_move(world, w, current, new, record, attempt + 1))  # fmt: skip
        return
    record["applied_mono_ms"] = sched.clock.mono_ms
    w.operator["merchant moved"] += 1
    sched.note(f"{MOVER} moved {SOURCE} -> {TARGET} (epoch {new.epoch})")
    # The ingress loads the new map a moment later (an operator restarts it): until then it still routes to s0.
    lag = w.rng.choice((0, w.rng.randrange(500, 5_000)))
    sched.at(sched.clock.mono_ms + lag, lambda: world.routing.__setitem__(MOVER, TARGET))


def held_for(shard: Shard) -> dict[str, list[str]]:
    """merchant -> what *shard*'s simulated Redis holds for it, as ops.shard_queues.queued reports a real one's."""
    found: dict[str, list[str]] = {}
    for name, queue in shard.redis.queues.items():
        for job in queue.jobs:
            merchant = merchant_of_job(job.args)
            found.setdefault(merchant or UNREADABLE, []).append(f"{name} queued")
    for hint in shard.redis.lists.get(reconcile_hint_key(shard.name), []):
        found.setdefault(str(hint).split("|", 1)[0], []).append("reconcile hint")
    return {m: sorted(set(places)) for m, places in found.items()}


def _map(world: World, owners: dict[str, str], *, epoch: int) -> ShardMap:
    shards = tuple(MapShard(name, f"redis://127.0.0.1:6379/{i}", Path(s.ledger_path))
                   for i, (name, s) in enumerate(sorted(world.shards.items())))  # fmt: skip
    return ShardMap(shards, dict(sorted(owners.items())), "<simulated shard map>", epoch)
