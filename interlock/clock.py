"""Time, read through one seam: wall-clock milliseconds (the one time unit stored in the ledger and on the
queues), the monotonic clock that send windows and deadlines are measured on, and sleep.

Every actor reads time here, never from `time` directly, so that one process can run them all under a
different clock: `interlock simulate` installs a simulated one (`use_clock`), in which a pause, a clock step
or a day's wait costs no wall time. Production never installs anything: the system clock is the default.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Clock(Protocol):
    def time_ns(self) -> int: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time_ns(self) -> int:
        return time.time_ns()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


_clock: Clock = SystemClock()


def now_ms() -> int:
    return _clock.time_ns() // 1_000_000


def monotonic() -> float:
    return _clock.monotonic()


def sleep(seconds: float) -> None:
    _clock.sleep(seconds)


@contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Read every actor's time from *clock* inside the block (the simulator's), and the system's again after."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous


def owner_id(role: str) -> str:
    """A lease owner id unique to this process: role, host, pid and a random suffix."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
