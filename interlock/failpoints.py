"""Named failpoints: `failpoint("rail.before_wal")` SIGKILLs its own process when INTERLOCK_KILL_AT
names that point, and is a no-op otherwise. The chaos matrix uses them to kill real processes at
exact places; SIGKILL (not an exception) so no cleanup, finally-block or atexit hook can run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

KILL_AT_ENV = "INTERLOCK_KILL_AT"

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
KNOWN_POINTS = frozenset(POINTS)


def arm(name: str, delay_ms: int) -> threading.Timer | None:
    """Fire *name* from a timer thread after *delay_ms*, while the caller is blocked elsewhere (e.g. a
    rail call in flight: `rail.during_call`). Returns None unless INTERLOCK_KILL_AT names the point."""
    if name not in KNOWN_POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    if os.environ.get(KILL_AT_ENV) != name:
        return None
    timer = threading.Timer(delay_ms / 1000, failpoint, args=(name,))
    timer.daemon = True
    timer.start()
    return timer


def failpoint(name: str) -> None:
    if name not in KNOWN_POINTS:
        raise ValueError(f"unknown failpoint {name!r}")
    target = os.environ.get(KILL_AT_ENV)
    if not target or target != name:
        return
    # Say where we died on stderr (never stdout: stdio ingress stdout is JSON-RPC only).
    sys.stderr.write(f"failpoint {name}: SIGKILL pid {os.getpid()}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
