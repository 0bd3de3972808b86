"""Redis commands per money call, by hop: what Redis itself saw (MONITOR), attributed to the process that sent it.

A count of commands is deterministic where a timing is not, so it is measured on a quiet stack and a test can
hold it to an upper bound. Each command MONITOR reports is charged to the process that owns the client socket
(its local port, looked up in /proc/net/tcp and the processes' open sockets) and, by the keys it names, to a hop:
the ingress's enqueue and its wait for the Outcome, a worker's dequeue, the prefetch that follows it, the job's
end, the Decision's enqueue, the Outcome's publish. Commands a script runs (MONITOR's "lua" client) count too,
charged to the EVAL/EVALSHA that ran them: Redis executes each one.

What is not per call is kept apart, as commands per second: a worker's heartbeat, state and suspension check
(at most once a second, whatever the load), a blocking dequeue that waited out its timeout on an idle queue,
the reconciler's own loop. So is the bench's own trace list (INTERLOCK_TRACE, never set in production).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.perf_rig import PerfRig, run_agents

BACKGROUND = "background"
BENCH_ONLY = "bench only"
_STOP = "interlock-bench-monitor-stop"
_JOB_FETCH = frozenset({"HGETALL", "HMGET", "HGET"})
_DEQUEUE = frozenset({"BLMOVE", "BRPOPLPUSH", "BLPOP"})
# A connection's own set-up and a script's loading: once per connection or process, not per call.
_CONNECTION = frozenset({"PING", "INFO", "CLIENT", "SUBSCRIBE", "ECHO", "SELECT", "HELLO", "SCRIPT"})
_WORKER_KEYS = ("rq:worker:", "rq:workers", "rq:suspended", "rq:clean_registries:", "rq:clean_groups", "rq:groups",
                "rq:group:", "rq:scheduler")  # fmt: skip
_MAINTENANCE = ("rq:finished:", "rq:wip:", "rq:ready:", "rq:rl-keys", "rq:scheduled:", "rq:deferred:",
                "rq:canceled:", "rq:started:")  # fmt: skip
_ID = re.compile(r"(?<=[-:_])[0-9a-f]{16,}|(?<=:)[A-Za-z0-9_.-]*\.[0-9a-f]{32}")


@dataclass(frozen=True)
class Command:
    at: float
    client: str  # "port" of a TCP client, "lua" for a script's own commands
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.argv[0].upper() if self.argv else ""

    @property
    def key(self) -> str:
        if self.name in ("EVAL", "EVALSHA") and len(self.argv) > 3:
            return self.argv[3]
        return self.argv[1] if len(self.argv) > 1 else ""


@dataclass
class RedisCount:
    """Commands Redis executed while *calls* money calls were made, by hop; background apart, per second."""

    calls: int
    seconds: float
    hops: dict[str, Counter[str]] = field(default_factory=dict)  # hop -> "COMMAND key-pattern" -> count
    background: Counter[str] = field(default_factory=Counter)  # "process: COMMAND key-pattern" -> count

    def hop_total(self, hop: str) -> int:
        return sum(self.hops.get(hop, Counter()).values())

    @property
    def per_call(self) -> float:
        total = sum(self.hop_total(hop) for hop in self.hops if hop != BENCH_ONLY)
        return total / self.calls if self.calls else 0.0

    @property
    def background_per_second(self) -> float:
        return sum(self.background.values()) / self.seconds if self.seconds else 0.0


def _pattern(command: Command) -> str:
    key = _ID.sub("*", command.key)
    key = re.sub(r"(proposal|decision|execute|reconcile)-[A-Za-z0-9_-]+", r"\1-*", key)
    key = re.sub(r"(interlock:outcome:)\S+", r"\1*", key)
    return f"{command.name} {key}".strip()


def _actor(process: str) -> str:
    if re.fullmatch(r"(perf)?gate\d*(_\d+)?", process):
        return "gate worker"
    return "rail worker" if process == "rail" else process


# A worker's own queue, by the job ids it takes from it: the rail worker's Decisions, and the retries and
# stranded intents the reconciler sends it.
_OWN_JOBS = {"gate worker": ("rq:job:proposal-",), "rail worker": ("rq:job:decision-", "rq:job:execute-")}
_OWN_QUEUE = {"gate worker": "rq:queue:gates", "rail worker": "rq:queue:rail"}


def hop_of(process: str, command: Command, in_transaction: bool) -> str:
    """The hop a command belongs to (or BACKGROUND / BENCH_ONLY). A blocking dequeue is charged to BACKGROUND here
    and moved to its worker's dequeue hop by attribute(), once per job it fetched."""
    actor, key, name = _actor(process), command.key, command.name
    if key.startswith("interlock:traces"):
        return BENCH_ONLY
    if name in _DEQUEUE and not key.startswith("interlock:outcome:"):
        return BACKGROUND
    if key.startswith(_WORKER_KEYS) or name in _CONNECTION:
        return BACKGROUND
    if actor == "reconciler" or key.startswith(_MAINTENANCE) or (name == "LRANGE" and key.endswith(":intermediate")):
        return BACKGROUND  # its sweep and RQ's registry maintenance run on a timer, not per call
    if actor == "ingress":
        waits = key.startswith("interlock:outcome:")
        return "ingress: wait for the Outcome" if waits else "ingress: enqueue the Proposal"
    if actor in _OWN_QUEUE:
        own_queue, own_jobs = _OWN_QUEUE[actor], _OWN_JOBS[actor]
        if key.startswith("interlock:outcome:"):
            return f"{actor}: publish the Outcome"
        if key.startswith("interlock:hints:"):
            return f"{actor}: hint the reconciler"
        if key.startswith(own_queue) and name not in ("LREM",):
            return f"{actor}: prefetch (more jobs after a dequeue)"
        if key.startswith(own_jobs) and name in _JOB_FETCH:
            return f"{actor}: prefetch (more jobs after a dequeue)" if in_transaction else f"{actor}: dequeue"
        if key.startswith(own_jobs) or key.startswith(own_queue):
            return f"{actor}: job end"
        if key.startswith(("rq:job:decision-", "rq:queue:rail", "rq:queues")):
            return f"{actor}: enqueue the Decision"
        if key.startswith(("rq:failed:", "rq:results:")):
            return f"{actor}: job end"
    return f"{actor}: other"


def _port_owners(pids: dict[str, int]) -> dict[str, str]:
    """Local TCP port -> process name, for every socket the named processes hold open."""
    inode_port: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            inode_port[parts[9]] = str(int(parts[1].rsplit(":", 1)[1], 16))
    owners: dict[str, str] = {}
    for name, pid in pids.items():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                port = inode_port.get(target[8:-1])
                if port is not None:
                    owners.setdefault(port, name)
    return owners


class CommandLog:
    """Every command Redis executes between start() and stop(), from a MONITOR connection on its own thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.commands: list[Command] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="redis-monitor")
        self._token = f"{_STOP}-{uuid.uuid4().hex}"
        self.started = self.ended = 0.0

    def start(self) -> CommandLog:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("MONITOR did not start")
        self.started = time.monotonic()
        return self

    def _run(self) -> None:
        client = redis.Redis.from_url(self.url)
        try:
            with client.monitor() as monitor:
                self._ready.set()
                for item in monitor.listen():
                    argv = tuple(item["command"].split(" ")) if item["command"] else ()
                    if len(argv) == 2 and argv[0].upper() == "ECHO" and argv[1] == self._token:
                        return
                    port = "lua" if item["client_type"] == "lua" else str(item["client_port"])
                    self.commands.append(Command(item["time"], port, argv))
        finally:
            client.close()

    def stop(self) -> list[Command]:
        self.ended = time.monotonic()
        client = redis.Redis.from_url(self.url)
        try:
            client.echo(self._token)
        finally:
            client.close()
        self._thread.join(10)
        return self.commands


def attribute(commands: list[Command], owners: dict[str, str], calls: int, seconds: float) -> RedisCount:
    """*commands* charged to hops. A script's commands go to the process that ran the script; MULTI to the hop of
    the command after it, EXEC to the hop of the one before it (same client). A blocking dequeue waits out its
    timeout on an idle queue as often as it takes a job, and MONITOR shows both alike: a worker's dequeues are
    charged to its dequeue hop once per job it fetched on its own (not in a prefetch's transaction), the rest
    to the background."""
    count = RedisCount(calls, seconds)
    last_script = "?"
    open_multi: dict[str, list[int]] = {}
    last_hop: dict[str, str] = {}
    charged: list[tuple[str, str, str]] = []  # (hop, process, pattern), MULTI left as "" until its hop is known
    for command in commands:
        if command.client == "lua":
            process = last_script
        else:
            process = owners.get(command.client, f"client {command.client}")
            if command.name in ("EVAL", "EVALSHA"):
                last_script = process
        pattern = _pattern(command)
        if command.name == "MULTI":
            open_multi.setdefault(command.client, []).append(len(charged))
            charged.append(("", process, pattern))
            continue
        if command.name == "EXEC":
            open_multi.pop(command.client, None)
            charged.append((last_hop.get(command.client, f"{_actor(process)}: other"), process, pattern))
            continue
        hop = hop_of(process, command, in_transaction=command.client in open_multi)
        for index in open_multi.get(command.client, []):
            if not charged[index][0]:
                charged[index] = (hop, *charged[index][1:])
        last_hop[command.client] = hop
        charged.append((hop, process, pattern))
    dequeues: Counter[str] = Counter()  # actor -> blocking dequeues seen
    for hop, process, pattern in charged:
        if hop.endswith(": dequeue") and pattern.split(" ")[0] in _JOB_FETCH:
            dequeues[_actor(process)] += 1
    for hop, process, pattern in charged:
        actor = _actor(process)
        if hop == BACKGROUND and pattern.split(" ")[0] in _DEQUEUE and dequeues[actor] > 0:
            dequeues[actor] -= 1
            hop = f"{actor}: dequeue"
        if hop == BACKGROUND or not hop:
            count.background[f"{actor}: {pattern}"] += 1
        else:
            count.hops.setdefault(hop, Counter())[pattern] += 1
    return count


def measure_redis(rig: PerfRig, calls: int, agents: int = 1) -> RedisCount:
    """Redis commands of *calls* gated refunds on *rig*'s stack, by *agents* concurrent agents (1: one call at a
    time, every queue empty between calls: the count a test can hold to a bound)."""
    log = CommandLog(rig.stack.redis_url or "").start()
    try:
        run_agents(rig, "gated", agents, calls)
    finally:
        commands = log.stop()
    owners = _port_owners({**rig.pids(), "bench": os.getpid()})
    return attribute(commands, owners, calls, log.ended - log.started)
