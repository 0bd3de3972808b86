"""RQ job functions for test_consumer.py (RQ imports a job's function by its dotted path)."""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_changed = threading.Condition(_lock)
_running = 0
peak = 0
GATHER_TIMEOUT_S = 60.0


def hold(seconds: float) -> str:
    """Sleep like a job waiting on a rail read; records how many ran at once in this process."""
    global _running, peak
    with _lock:
        _running += 1
        peak = max(peak, _running)
    try:
        time.sleep(seconds)
    finally:
        with _lock:
            _running -= 1
    return "held"


def gather(together: int) -> str:
    """Run until *together* jobs run at once in this process (or a generous deadline passes), then end: how many a pool
    runs together is then seen however slow the machine, where a fixed sleep would only show it on a quiet one."""
    global _running, peak
    with _changed:
        _running += 1
        peak = max(peak, _running)
        _changed.notify_all()
        try:
            _changed.wait_for(lambda: peak >= together, timeout=GATHER_TIMEOUT_S)
        finally:
            _running -= 1
    return "gathered"


def refuse(reason: str) -> None:
    raise ValueError(reason)
