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

BENCH = "bench (the agents' MCP / REST clients)"
_TICK = os.sysconf("SC_CLK_TCK")


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


class CpuMeter:
    """CPU each process spends between start() and stop(), charged to *calls* calls. *pids* names the processes
    (a process that died in between is left out)."""

    def __init__(self, pids: Callable[[], dict[str, int]], label: str, calls: int) -> None:
        self.pids, self.label, self.calls = pids, label, calls
        self._before: dict[str, tuple[int, float | None]] = {}
        self._mine = 0.0

    def start(self) -> None:
        self._before = {name: (pid, cpu_seconds(pid)) for name, pid in self.pids().items()}
        self._mine = _self_cpu()

    def stop(self) -> CpuSample:
        sample = CpuSample(self.label, self.calls)
        sample.ms_per_call[BENCH] = (_self_cpu() - self._mine) * 1000 / max(self.calls, 1)
        for name, (pid, start) in self._before.items():
            end = cpu_seconds(pid)
            if start is not None and end is not None:
                sample.ms_per_call[name] = (end - start) * 1000 / max(self.calls, 1)
        return sample
