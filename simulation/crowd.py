"""Lists longer than a page (ADR 0004): someone else on the rail account — the merchant's dashboard, another
integration — keeps making refunds and instant settlements while the run goes on, none of them stamped.

Razorpay lists newest first, at most 100 to a page, and Interlock asks for 100. Without other traffic every
simulated list fits in one page, so a reader that concluded absence after page one would pass. Here, on a share of
the seeds, two payments of each shard that the agents refund get up to 120 refunds of Rs 1 from elsewhere, and the
account up to 130 instant settlements of Rs 1, spread over the fault phase: an entity of ours is soon behind a page
of newer ones, and only a reader that pages to the end finds it (or concludes it absent).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulation.world import Shard, World

REFUNDS_PER_PAYMENT = 120
SETTLEMENTS = 130
ONE_RUPEE = 100


def install_crowd(world: World, seed: int, phase_ms: int) -> None:
    """Room on two refunded payments per shard for the others' refunds, and an actor per shard making them."""
    rng = random.Random(f"crowd:{seed}")
    for shard in world.shards.values():
        refunded = sorted({a.subject for a in world.actions
                           if a.shard == shard.name and a.subject in shard.rail.payments})  # fmt: skip
        crowded = rng.sample(refunded, min(2, len(refunded)))
        for payment_id in crowded:
            shard.rail.payments[payment_id]["amount"] += REFUNDS_PER_PAYMENT * ONE_RUPEE
        proc = world.sched.process(f"dashboard:{shard.name}", crashable=False)
        world.sched.spawn(f"dashboard:{shard.name}", proc,
                          lambda shard=shard, crowded=crowded: _others(world, shard, crowded, phase_ms))  # type: ignore[misc]


def _others(world: World, shard: Shard, crowded: list[str], phase_ms: int) -> None:
    sched, rail = world.sched, shard.rail
    todo = [("settlement", "")] * SETTLEMENTS + [("refund", p) for p in crowded for _ in range(REFUNDS_PER_PAYMENT)]
    sched.rng.shuffle(todo)
    gap = max(phase_ms // max(len(todo), 1), 1)
    for kind, payment_id in todo:
        sched.sleep(sched.rng.randint(1, 2 * gap))
        if kind == "refund":
            rail.add_foreign_refund(payment_id, ONE_RUPEE)
        else:
            rail.add_foreign_settlement(ONE_RUPEE)
