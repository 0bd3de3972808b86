"""Each process its own clock (issue 45 item 5): the ingress, the gate workers, the rail workers, the reconcilers
and the operator each read a wall clock of their own, as processes on machines of their own do.

A seed draws whether its processes' clocks are skewed (swarm-style, from a generator of its own, so the seeds
that draw no skew run exactly as before) and the bound: the most two of the deployment's wall clocks differ. Each
process's clock reads the shared wall clock plus an offset drawn for it within half the bound either way
(`scheduler.Skew`), and the deployment is configured with that bound (INTERLOCK_CLOCK_SKEW_MS), as an operator
who keeps the hosts' clocks within it would configure it. A clock step (the clock_step fault) then moves every
clock at once, as before, or one process's clock alone, held within the bound. Monotonic clocks are each
process's own and never jump. The rail keeps the true time, and the checker judges by it.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from simulation.scheduler import Scheduler, Skew

DAY_MS = 86_400_000  # the simulated mandates' idempotency window (simulation.world)

if TYPE_CHECKING:  # the world steps clocks through this module
    from simulation.world import World

SKEW = "skew"  # the fault kind (and focus): every process on its own skewed clock
# A focus, never drawn: ADR 0009's grace configured to 0 (plain windows, but for a first call unsettled or not yet
# admitted when its repeat is received) and the run started seconds before a window's boundary, so that repeats are
# judged past the grace by comparing the ingress's clock with the clocks that admitted and settled the first call.
SHORT_GRACE = "short_grace"
SHARE = 0.5  # of the seeds draw it
BOUNDS_MS = (200, 2_000, 5_000)  # the most two processes' wall clocks differ, as the deployment is told
ONE_PROCESS = 0.5  # with skew, the share of clock steps that step one process's clock rather than every clock


def plan_skew(seed: int, disabled: frozenset[str] = frozenset(), focus: frozenset[str] = frozenset()) -> int:
    """The seed's skew bound in ms, 0 for one clock shared by every process."""
    rng = random.Random(f"skew:{seed}")
    drawn, bound = rng.random() < SHARE, rng.choice(BOUNDS_MS)
    return bound if (drawn or SKEW in focus) and SKEW not in disabled else 0


def install_clocks(world: World, seed: int, bound_ms: int, focus: frozenset[str] = frozenset()) -> None:
    """Give every process its own clock within *bound_ms* (none with 0), and tell each shard the bound; with the
    focus SHORT_GRACE, no settlement grace and a start 1-10 s before the next window boundary."""
    clock = world.sched.clock
    if bound_ms:
        clock.skew = Skew(bound_ms, random.Random(f"skew-clocks:{seed}"))
    update: dict[str, int] = {"clock_skew_ms": bound_ms}
    if SHORT_GRACE in focus:
        update["settlement_window_grace_ms"] = 0
        before = random.Random(f"short-grace:{seed}").randint(1_000, 10_000)
        clock.wall_offset_ms = (clock.wall_offset_ms // DAY_MS + 1) * DAY_MS - before
    for shard in world.shards.values():
        shard.settings = shard.settings.model_copy(update=update)


def step_clock(sched: Scheduler, process: str, step_ms: int) -> None:
    """The clock_step fault, about to resume an actor of *process*: every clock stepped, or (with skew) its own."""
    clock = sched.clock
    alone = clock.skew is not None and clock.skew.rng.random() < ONE_PROCESS
    taken = clock.step(step_ms, process if alone else None)
    sched.counters.fault("clock_step")
    sched.note(f"clock step {taken:+d}" + (f" {process}" if alone else ""))
