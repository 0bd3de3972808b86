"""Named failpoints: `failpoint("rail.before_wal")` SIGKILLs its own process when INTERLOCK_KILL_AT
names that point, SIGSTOPs it when INTERLOCK_PAUSE_AT does, and is a no-op otherwise. The chaos
matrix uses them to kill real processes at exact places; SIGKILL (not an exception) so no cleanup,
finally-block or atexit hook can run. A pause is what a kill is not — a GC, VM steal or I/O stall:
every thread stops where it is, the process keeps its sockets and state, and it carries on from the
same line when someone sends SIGCONT (the chaos pause cells do, after its lease has run out).

INTERLOCK_KILL_IN_FLIGHT=N holds the kill (or pause) back until at least N money calls of this process
are in flight, for the chaos burst cells: a call is in flight from `rail.after_wal_before_call` (its
IN_FLIGHT row committed, the request about to leave) until `rail.after_call_before_commit` (the answer in
hand, not yet recorded), where it still counts itself. The count is kept only while the variable is set.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

KILL_AT_ENV = "INTERLOCK_KILL_AT"
PAUSE_AT_ENV = "INTERLOCK_PAUSE_AT"
KILL_IN_FLIGHT_ENV = "INTERLOCK_KILL_IN_FLIGHT"
# Where a money call enters and leaves the in-flight count that INTERLOCK_KILL_IN_FLIGHT waits for.
CALL_SENT, CALL_ANSWERED = "rail.after_wal_before_call", "rail.after_call_before_commit"

# In the order a money call meets them.
POINTS: tuple[str, ...] = (
    "ingress.after_enqueue",
    "gate.after_resolve",
    "rail.before_wal",
    "rail.after_wal_before_call",
    "rail.during_call",
    "rail.after_call_before_commit",
    "rail.after_commit_before_ack",
    "reconciler.mid_pagination",
    "reconciler.after_finding_before_commit",
)
# The webhook receiver's, in the order a delivery meets them: verified and its inbox row written, the transaction
# not committed (a kill here loses the delivery mid-way); the commit made, the 200 not sent.
WEBHOOK_POINTS: tuple[str, ...] = ("webhooks.before_commit", "webhooks.after_store_before_ack")
KNOWN_POINTS = frozenset(POINTS + WEBHOOK_POINTS)

# A pause happens once per process: the experiment is one stall, not a worker that stalls on every call.
_paused: set[str] = set()
_paused_lock = threading.Lock()
_in_flight = 0
_in_flight_lock = threading.Lock()


def arm(name: str, delay_ms: int) -> threading.Timer | None:
    """Fire *name* from a timer thread after *delay_ms*, while the caller is blocked elsewhere (e.g. a
    rail call in flight: `rail.during_call`). Returns None unless INTERLOCK_KILL_AT or INTERLOCK_PAUSE_AT
    names the point (and, under INTERLOCK_KILL_IN_FLIGHT, enough calls are in flight now)."""
    if name not in KNOWN_POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    if name not in (os.environ.get(KILL_AT_ENV), os.environ.get(PAUSE_AT_ENV)) or not _enough_in_flight():
        return None
    # Judged now, fired later regardless: the calls this one joined may be answered within the delay.
    timer = threading.Timer(delay_ms / 1000, _fire, args=(name,))
    timer.daemon = True
    timer.start()
    return timer


def failpoint(name: str) -> None:
    if name not in KNOWN_POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    counting = bool(os.environ.get(KILL_IN_FLIGHT_ENV)) and name in (CALL_SENT, CALL_ANSWERED)
    if counting and name == CALL_SENT:
        _count(+1)
    try:
        if name in (os.environ.get(KILL_AT_ENV), os.environ.get(PAUSE_AT_ENV)) and _enough_in_flight():
            _fire(name)
    finally:
        if counting and name == CALL_ANSWERED:
            _count(-1)


def in_flight() -> int:
    """Money calls of this process now between CALL_SENT and CALL_ANSWERED (0 unless INTERLOCK_KILL_IN_FLIGHT)."""
    with _in_flight_lock:
        return _in_flight


def _count(step: int) -> None:
    global _in_flight
    with _in_flight_lock:
        _in_flight += step


def _enough_in_flight() -> bool:
    wanted = os.environ.get(KILL_IN_FLIGHT_ENV)
    return not wanted or in_flight() >= int(wanted)


def _fire(name: str) -> None:
    wanted = os.environ.get(KILL_IN_FLIGHT_ENV)
    count = f" with {in_flight()} calls in flight" if wanted else ""
    if os.environ.get(KILL_AT_ENV) == name:
        _say(f"failpoint {name}: SIGKILL pid {os.getpid()}{count}")
        os.kill(os.getpid(), signal.SIGKILL)
    elif os.environ.get(PAUSE_AT_ENV) == name:
        with _paused_lock:
            if name in _paused:
                return
            _paused.add(name)
        _say(f"failpoint {name}: SIGSTOP pid {os.getpid()}{count}")
        # Aimed at this thread (a stop always stops the whole process): it is the thread at the point, and it
        # must stop on this line, not a few lines later while another thread takes the signal.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # returns once SIGCONT arrives
        _say(f"failpoint {name}: SIGCONT pid {os.getpid()}, carrying on")


def _say(line: str) -> None:
    # stderr, never stdout: the stdio ingress's stdout is JSON-RPC only.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
