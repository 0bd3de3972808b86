"""The seeded scheduler: every actor of the simulated deployment is a greenlet, and only one runs at a time.

An actor runs until it reaches a *point* — a Redis operation, a rail call, a ledger transaction, a sleep — and
hands control back here. The scheduler then picks, with the seed's random generator, which ready actor runs
next, and at that moment may crash a process (its actors never run again; its memory is gone and it restarts
from the ledger and Redis), pause one for a simulated while, or step the wall clock. Time is simulated: it moves
a little with every step and jumps to the next wake-up when every actor is waiting, so a lease running out, a
reconcile delay or a window boundary costs no wall time.

Same seed, same code: same order of points, same trace hash. Nothing here knows what the actors do.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import greenlet

# A lost machine's processes are renamed so (simulation.machine_loss): the shard's names go to the new machine's.
LOST = "lost/"


class Killed(BaseException):
    """Raised inside an actor once its process has been crashed: nothing of it may run on. A BaseException, so
    that no `except Exception` of the actor's own code swallows it, as nothing survives a SIGKILL."""


@dataclass
class Process:
    """What a SIGKILL takes down together: the actors of one OS process, the resources they opened, and how it
    comes back (a supervisor's restart)."""

    name: str
    restart: Callable[[], None] | None = None  # starts the process again from durable state
    restart_after_ms: int = 1_000
    crashable: bool = True
    dead: bool = False
    incarnation: int = 0
    on_crash: list[Callable[[], None]] = field(default_factory=list)  # close its SQLite connections, etc.
    paused_until: int | None = None


@dataclass
class Actor:
    name: str
    process: Process
    glet: greenlet.greenlet
    wake_at: int | None = None  # sleeping (or waiting with a timeout) until this simulated instant
    until: Callable[[], bool] | None = None  # waiting for this to become true
    done: bool = False
    last_point: str = ""  # where it stopped last

    def ready(self, now: int) -> bool:
        if self.done or self.process.dead:
            return False
        if self.process.paused_until is not None and self.process.paused_until > now:
            return False
        if self.until is not None and self.until():
            return True
        return self.wake_at is None and self.until is None or self.wake_at is not None and self.wake_at <= now


@dataclass
class Skew:
    """Each process's own wall clock (each runs as if on a machine of its own): it reads the shared wall clock plus
    an offset drawn for it, within ±bound_ms/2 of the others' midpoint, so that no two processes' clocks differ by
    more than bound_ms; a step of one process's clock keeps it within that. Its monotonic clock is its own too
    (it started at a drawn uptime), and never jumps."""

    bound_ms: int
    rng: random.Random
    offsets: dict[str, int] = field(default_factory=dict)  # process name -> its wall clock's offset (ms)
    uptimes: dict[str, int] = field(default_factory=dict)  # process name -> its monotonic clock at mono 0 (ms)

    def offset(self, process: str) -> int:
        if process not in self.offsets:  # drawn on its first reading: the order of readings is the seed's
            half = self.bound_ms // 2
            self.offsets[process] = self.rng.randint(-half, half)
            self.uptimes[process] = self.rng.randrange(0, 30 * 86_400_000)
        return self.offsets[process]

    def step(self, process: str, step_ms: int) -> int:
        """Step *process*'s clock by *step_ms*, held within the bound; the step taken."""
        half, before = self.bound_ms // 2, self.offset(process)
        self.offsets[process] = max(-half, min(half, before + step_ms))
        return self.offsets[process] - before


class SimClock:
    """The simulated clocks: a monotonic one that only moves forward (`mono_ms`, the run's true clock), and a wall
    clock that may be stepped, for every process at once or, with `skew`, for one process alone. Code reading the
    clock through interlock.clock reads the clocks of the process whose actor is running."""

    def __init__(self, start_ms: int, scheduler: Scheduler) -> None:
        self.mono_ms = 0
        self.wall_offset_ms = start_ms  # the shared wall clock at mono 0, moved by the steps of every clock at once
        self.set_back_ms = 0  # how far, in all, the shared wall clock has been stepped back
        self.stepped_ms = 0  # how far, in all, the shared wall clock has been stepped (either way)
        self.skew: Skew | None = None  # per-process clocks (simulation.clocks), or one clock for every process
        self.scheduler = scheduler

    def true_ms(self) -> int:
        """The wall time it really is (no step, no skew): what the checker judges by, and the rail's clock."""
        return self.mono_ms + self.wall_offset_ms - self.stepped_ms

    def wall_ms(self, process: str | None) -> int:
        """*process*'s wall clock (None: the shared one, read by the scheduler's own timers)."""
        skew = self.skew
        offset = skew.offset(process) if skew is not None and process is not None else 0
        return self.mono_ms + self.wall_offset_ms + offset

    def step(self, step_ms: int, process: str | None = None) -> int:
        """Step the wall clock of every process, or of *process* alone (held within the skew's bound); the step."""
        if process is not None and self.skew is not None:
            return self.skew.step(process, step_ms)
        self.wall_offset_ms += step_ms
        self.stepped_ms += step_ms
        self.set_back_ms += max(-step_ms, 0)
        return step_ms

    def _process(self) -> str | None:
        actor = self.scheduler.current
        return None if actor is None else actor.process.name

    def now_ms(self) -> int:
        return self.wall_ms(self._process())

    def time_ns(self) -> int:
        return self.now_ms() * 1_000_000

    def monotonic(self) -> float:
        skew, process = self.skew, self._process()
        if skew is None or process is None:
            return self.mono_ms / 1000
        skew.offset(process)
        return (self.mono_ms + skew.uptimes[process]) / 1000

    def sleep(self, seconds: float) -> None:
        self.scheduler.sleep(max(int(seconds * 1000), 1))


@dataclass
class Counters:
    steps: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


class Deadlock(RuntimeError):
    pass


class Scheduler:
    """Picks who runs next, at every point, with one seeded generator."""

    def __init__(self, seed: int, *, start_ms: int, max_steps: int) -> None:
        self.rng = random.Random(seed)
        self.clock = SimClock(start_ms, self)
        self.max_steps = max_steps
        self.actors: list[Actor] = []
        self.processes: dict[str, Process] = {}
        self.counters = Counters()
        self.root = greenlet.getcurrent()
        self.current: Actor | None = None
        self._trace = hashlib.sha256()
        self.trace_tail: list[str] = []  # the last points, for a failing seed's report
        # Decides, before an actor resumes, whether a fault strikes it (set by the world's fault plan).
        self.before_resume: Callable[[Actor], None] | None = None
        self._timers: list[tuple[int, int, Callable[[], None]]] = []
        self.stopped: set[tuple[str, int]] = set()  # (process, incarnation) killed or exited: its memory is gone
        self._timer_seq = 0

    # -- building --------------------------------------------------------------------------------------------

    def process(self, name: str, **kwargs: object) -> Process:
        proc = self.processes.get(name)
        if proc is None:
            proc = self.processes[name] = Process(name, **kwargs)  # type: ignore[arg-type]
        return proc

    def spawn(self, name: str, process: Process, body: Callable[[], None]) -> Actor:
        """Start *body* as an actor of *process*; it first runs when the scheduler picks it."""

        def run() -> None:
            try:
                body()
            except Killed:
                pass
            finally:
                actor.done = True

        actor = Actor(name, process, greenlet.greenlet(run, parent=self.root))
        self.actors.append(actor)
        return actor

    # -- what actors call ------------------------------------------------------------------------------------

    def point(self, label: str) -> None:
        """An actor reached a point where another may run first (or a fault may strike)."""
        actor = self._me()
        if actor is None:
            return
        self._record(actor, label)
        actor.last_point = label
        self._switch()

    def sleep(self, ms: int) -> None:
        actor = self._me()
        if actor is None:
            raise RuntimeError("sleep outside an actor")
        actor.wake_at = self.clock.mono_ms + ms
        self._switch()

    def wait(self, until: Callable[[], bool], timeout_ms: int | None) -> bool:
        """Park until *until()* holds or *timeout_ms* passes; True when it holds."""
        actor = self._me()
        if actor is None:
            raise RuntimeError("wait outside an actor")
        if until():
            self.point("wait.ready")
            return True
        actor.until = until
        actor.wake_at = None if timeout_ms is None else self.clock.mono_ms + timeout_ms
        self._switch()
        return until()

    def alive(self) -> None:
        """Raise Killed when the calling actor's process has been crashed (for code run while it unwinds)."""
        actor = self.current
        if actor is not None and actor.process.dead:
            raise Killed()

    def _me(self) -> Actor | None:
        actor = self.current
        if actor is None or greenlet.getcurrent() is not actor.glet:
            return None
        if actor.process.dead:
            raise Killed()
        return actor

    def _switch(self) -> None:
        self.root.switch()
        actor = self.current
        if actor is not None and actor.process.dead:
            raise Killed()

    def _record(self, actor: Actor, label: str) -> None:
        line = f"{self.clock.mono_ms} {actor.name} {label}"
        self._trace.update(line.encode() + b"\n")
        self.trace_tail.append(line)
        if len(self.trace_tail) > 60:
            del self.trace_tail[:20]

    def note(self, line: str) -> None:
        """A scheduler-level event (a fault, a restart) in the trace."""
        self._trace.update(f"{self.clock.mono_ms} * {line}".encode() + b"\n")
        self.trace_tail.append(f"{self.clock.mono_ms} * {line}")

    @property
    def trace_hash(self) -> str:
        return self._trace.hexdigest()[:16]

    # -- faults ----------------------------------------------------------------------------------------------

    def crash(self, proc: Process, *, fault: bool = True) -> None:
        """SIGKILL: every actor of *proc* stops where it is, its resources are dropped, and it restarts later.
        *fault* False: the process exited by itself (its lease was lost) and is stopped and restarted the same way."""
        if proc.dead:
            return
        proc.dead = True
        self.stopped.add((proc.name, proc.incarnation))
        if fault:
            self.counters.fault("crash")
        self.note(f"{'crash' if fault else 'exit'} {proc.name}")
        for close in proc.on_crash:
            close()
        proc.on_crash.clear()
        for actor in [a for a in self.actors if a.process is proc and not a.done]:
            # Unwind it now, with every point refusing to run: finally blocks touch nothing outside its memory.
            previous, self.current = self.current, actor
            try:
                actor.glet.throw(Killed())
            except Killed:
                pass
            finally:
                self.current = previous
                actor.done = True
        if proc.restart is not None:
            restart = proc.restart
            self.at(self.clock.mono_ms + proc.restart_after_ms, lambda: self._restart(proc, restart))

    def _restart(self, proc: Process, restart: Callable[[], None]) -> None:
        if proc.restart is None:  # withdrawn since it died (its machine is gone, simulation.machine_loss)
            return
        proc.dead = False
        proc.paused_until = None
        proc.incarnation += 1
        self.note(f"restart {proc.name}")
        restart()

    def pause(self, proc: Process, ms: int) -> None:
        self.counters.fault("pause")
        self.note(f"pause {proc.name} {ms}")
        proc.paused_until = self.clock.mono_ms + ms

    def close(self) -> None:
        """End the run: every process still alive is stopped the way a crash stops it (nothing restarts)."""
        for proc in self.processes.values():
            proc.restart = None
            self.crash(proc, fault=False)

    # -- timers ----------------------------------------------------------------------------------------------

    def at(self, mono_ms: int, fn: Callable[[], None]) -> None:
        """Run *fn* in the scheduler (not in an actor) once simulated time reaches *mono_ms*."""
        self._timers.append((mono_ms, self._timer_seq, fn))
        self._timer_seq += 1

    # -- the loop --------------------------------------------------------------------------------------------

    def run(self, *, until: Callable[[], bool] | None = None, deadline_ms: int | None = None) -> None:
        """Run actors until *until()* holds, every actor is done, simulated time passes *deadline_ms* or the
        step budget is spent."""
        while self.counters.steps < self.max_steps:
            if until is not None and until():
                return
            now = self.clock.mono_ms
            if deadline_ms is not None and now >= deadline_ms:
                return
            self._fire_timers(now)
            ready = [a for a in self.actors if a.ready(now)]
            if not ready:
                wake = self._next_wake(now)
                if wake is None:
                    return  # everyone is done, or waits for ever on something nobody will do
                self.clock.mono_ms = wake if deadline_ms is None else min(wake, deadline_ms)
                continue
            actor = ready[self.rng.randrange(len(ready))]
            if self.before_resume is not None:
                self.before_resume(actor)
                if not actor.ready(self.clock.mono_ms):
                    continue
            self.counters.steps += 1
            self.clock.mono_ms += self.rng.choice((0, 0, 1, 1, 2, 5))  # each step takes a little time
            actor.until, actor.wake_at = None, None
            self.current = actor
            try:
                actor.glet.switch()
            finally:
                self.current = None
            self.actors = [a for a in self.actors if not a.done]

    def _fire_timers(self, now: int) -> None:
        due = sorted(t for t in self._timers if t[0] <= now)
        if not due:
            return
        self._timers = [t for t in self._timers if t[0] > now]
        for _, _, fn in due:
            fn()

    def _next_wake(self, now: int) -> int | None:
        wakes = [t[0] for t in self._timers]
        for a in self.actors:
            if a.done or a.process.dead:
                continue
            if a.process.paused_until is not None and a.process.paused_until > now:
                wakes.append(a.process.paused_until)
            elif a.wake_at is not None:
                wakes.append(a.wake_at)
        wakes = [w for w in wakes if w > now]
        return min(wakes) if wakes else None
