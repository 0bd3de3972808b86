"""CPU per money call, by process: where a 2-CPU machine's cycles go when every hop is ready at once.

Read from /proc/<pid>/stat (user + system time, every thread) of each process the bench started, and from
os.times() for the bench itself, which runs the agents (MCP or REST clients). Per call = the growth over
one throughput run divided by the calls it made. On a machine with C CPUs, no design can move more than
C × 1000 / (CPU ms per call, all processes) calls per second: that is the ceiling the table states.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

BENCH = "bench (the agents' MCP / REST clients)"
_TICK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of *pid* (all its threads); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15 of stat(5)


@dataclass
class CpuSample:
    label: str
    calls: int
    ms_per_call: dict[str, float] = field(default_factory=dict)  # process -> CPU ms per call

    @property
    def total_ms(self) -> float:
        return sum(self.ms_per_call.values())


def _self_cpu() -> float:
    times = os.times()
    return times.user + times.system


def measure(pids: Callable[[], dict[str, int]], label: str, calls: int, run: Callable[[], T]) -> tuple[T, CpuSample]:
    """Run *run* and charge the CPU each process spent meanwhile to *calls* calls. *pids* names the processes
    (read before and after: a process that died in between is left out)."""
    watched = pids()
    before = {name: cpu_seconds(pid) for name, pid in watched.items()}
    mine = _self_cpu()
    result = run()
    sample = CpuSample(label, calls)
    sample.ms_per_call[BENCH] = (_self_cpu() - mine) * 1000 / max(calls, 1)
    for name, pid in watched.items():
        start, end = before[name], cpu_seconds(pid)
        if start is not None and end is not None:
            sample.ms_per_call[name] = (end - start) * 1000 / max(calls, 1)
    return result, sample
