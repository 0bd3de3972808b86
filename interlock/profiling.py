"""An actor's CPU profile on request: where its cycles go, by function, for `interlock bench perf --profile`.

With INTERLOCK_PROFILE_DIR set, an actor starts yappi (a dev dependency) on its CPU clock, every thread included,
as it starts. On PROFILE_SIGNAL (SIGUSR2) it writes what it gathered since the previous signal, or since it started,
to `<dir>/<pid>.<n>.pstat` (the standard library's pstats format) and starts gathering afresh: the bench signals
once after its warm-up (that file is discarded) and once after the measured calls. Off by default; nothing in a
deployment sets it. The signal handler runs in the main thread between two bytecodes, so a worker blocked in its
dequeue writes within a second (IDLE_WAIT_S).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from types import FrameType

logger = logging.getLogger(__name__)

PROFILE_ENV = "INTERLOCK_PROFILE_DIR"
PROFILE_SIGNAL = signal.SIGUSR2


def profile_path(directory: Path, pid: int, n: int) -> Path:
    return directory / f"{pid}.{n}.pstat"


def start_from_env() -> bool:
    """Start profiling this process if PROFILE_ENV names a directory; True when it did."""
    directory = os.environ.get(PROFILE_ENV)
    if not directory:
        return False
    try:
        import yappi
    except ImportError:
        logger.warning("%s is set but yappi is not installed (`make install` brings it): not profiling", PROFILE_ENV)
        return False
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal written
        yappi.stop()
        written += 1
        yappi.get_func_stats().save(str(profile_path(out, os.getpid(), written)), type="pstat")
        yappi.clear_stats()
        yappi.start(builtins=True, profile_threads=True)

    yappi.set_clock_type("cpu")
    yappi.start(builtins=True, profile_threads=True)
    signal.signal(PROFILE_SIGNAL, dump)
    return True
