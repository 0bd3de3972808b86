"""Redis dying under load (issue 17): distinct refunds from several agents while redis-server is SIGKILLed
and restarted, or paused (SIGSTOP) for longer than the ingress waits for an outcome.

Redis runs as `interlock up` runs it: AOF on, `appendfsync everysec`. A SIGKILL may lose the last second of
queue writes; nothing Interlock guarantees rests on Redis (the ledger decides, ADR 0007), so a lost job or
outcome costs only a repeat, and `always` would put an fsync on every enqueue for nothing. Processes that
exit because Redis went away are restarted the way supervisord restarts them in `interlock up`. Each agent
repeats every call until its answer is definite. Expected: 0 double pays, every intent definite (APPLIED),
the ledger's APPLIED exactly the stamped entities, a verifying audit chain. Reported: the IN_PROGRESS
answers the agents saw and how long the system took to answer definitely again after each outage.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from chaos.crowd import Crowd, token_of
from chaos.trial import TIMINGS, _observe_all, _restart_the_dead, _settle_all
from chaos.verdict import judge
from deploy.agent_client import mcp_client, structured
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Stack, StackError

REFUND = 10_000
PENDING = ("IN_PROGRESS", "UNKNOWN")
OUTCOME_WAIT_MS = int(TIMINGS.get("INTERLOCK_OUTCOME_WAIT_MS", "2500"))


@dataclass
class Outage:
    kind: str  # "kill" or "pause"
    at_s: float  # since the first call
    down_s: float  # how long Redis was gone (killed: until restarted; paused: until SIGCONT)
    recovered_s: float | None = None  # back up -> the first definite answer after it


@dataclass
class RedisLoadResult:
    refunds: int
    agents: int
    mode: str  # "kill" or "pause"
    answers: Counter[str] = field(default_factory=Counter)  # every answer the agents saw, by state or error
    outages: list[Outage] = field(default_factory=list)
    restarts: int = 0  # actor processes restarted after they exited
    intents: int = 0
    entities: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        outs = ", ".join(f"{o.kind} {o.down_s:.1f}s -> definite again in "
                         + (f"{o.recovered_s:.1f}s" if o.recovered_s is not None else "never") for o in self.outages)
        return (f"redis {self.mode}: {self.refunds} refunds from {self.agents} agents, {len(self.outages)} outages "
                f"({outs}); {self.answers.get('IN_PROGRESS', 0)} IN_PROGRESS answers; {self.intents} intents, "
                f"{self.entities} entities, {len(self.violations)} violations")  # fmt: skip


def run_redis_load(refunds: int, agents: int, base: Path, *, mode: str = "kill", outages: int = 4,
                   seed: int = 1) -> RedisLoadResult:  # fmt: skip
    rng = random.Random(seed)
    started = time.monotonic()
    names = [f"agent_load{i}" for i in range(agents)]
    crowd = Crowd.prepare(base / f"redis-{mode}-{refunds}", names)
    stack, tokens, data = crowd.stack, crowd.tokens, crowd.stack.data_dir
    result = RedisLoadResult(refunds, agents, mode)
    stop = threading.Event()
    try:
        crowd.start(seed=seed)
        url, control = crowd.url, crowd.control
        assert control is not None
        payments = crowd.payments(f"pay_rl{seed}x", refunds)
        watchdog = threading.Thread(target=_supervise, args=(stack, tokens, stop, result), daemon=True)
        watchdog.start()
        definite: list[float] = []  # monotonic instants of definite answers
        asyncio.run(_load(url, names, payments, stack, rng, mode, outages, result, definite))
        stop.set()
        watchdog.join(timeout=30)
        result.restarts += _restart_dead(stack, tokens)
        _settle_all(stack, payments, timeout_s=180)
        obs = _observe_all(stack, control, payments)
        control.close()
        result.intents, result.entities = len(obs.intents), sum(len(v) for v in obs.stamped.values())
        result.violations += judge(obs)
        if result.intents != refunds or any(i["state"] != "APPLIED" for i in obs.intents):
            states = Counter(i["state"] for i in obs.intents)
            result.violations.append(f"NOT_ALL_APPLIED: {result.intents} intents for {refunds} refunds: {dict(states)}")
    except (StackError, OSError) as exc:
        result.violations.append(f"HARNESS: {exc}"[:400])
    finally:
        stop.set()
        if stack.redis is not None and stack.redis.process is not None and stack.redis.process.poll() is None:
            os.kill(stack.redis.process.pid, signal.SIGCONT)  # never leave a stopped redis-server behind
        stack.kill_all()
        result.seconds = round(time.monotonic() - started, 1)
        if not result.violations:
            shutil.rmtree(data, ignore_errors=True)
    return result


async def _load(url: str, names: list[str], payments: list[str], stack: Stack, rng: random.Random, mode: str,
                outages: int, result: RedisLoadResult, definite: list[float]) -> None:  # fmt: skip
    began = time.monotonic()
    done = asyncio.Event()
    mine = [payments[i::len(names)] for i in range(len(names))]
    finished = [0]  # refunds answered definitely so far
    # Each outage lands at a random point of the run, measured in refunds done: always while calls are going.
    marks = sorted(rng.uniform(0.1, 0.85) * len(payments) for _ in range(outages))

    async def agent(name: str, pids: list[str]) -> None:
        for pid in pids:
            while True:
                state = await _call(url, name, pid)
                result.answers[state] += 1
                if state not in PENDING and not state.startswith("error:"):
                    definite.append(time.monotonic())
                    finished[0] += 1
                    break
                await asyncio.sleep(0.25)

    async def breaker() -> None:
        for mark in marks:
            while finished[0] < mark and not done.is_set():
                await asyncio.sleep(0.05)
            if done.is_set():
                return
            await asyncio.to_thread(_outage, stack, mode, rng, began, result)

    async def agents() -> None:
        await asyncio.gather(*(agent(name, pids) for name, pids in zip(names, mine, strict=True)))
        done.set()

    await asyncio.gather(agents(), breaker())
    for outage in result.outages:
        back = began + outage.at_s + outage.down_s
        after = [t for t in definite if t >= back]
        outage.recovered_s = round(min(after) - back, 2) if after else None


async def _call(url: str, name: str, pid: str) -> str:
    try:
        async with mcp_client(url, token_of(name), timeout_s=30) as client:
            answer = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
    except Exception as exc:  # noqa: BLE001 - the ingress may be restarting after Redis went away
        return f"error:{type(exc).__name__}"
    return str(answer.get("state") or f"error:{answer.get('error', {}).get('code', 'no state')}")


def _outage(stack: Stack, mode: str, rng: random.Random, began: float, result: RedisLoadResult) -> None:
    assert stack.redis is not None and stack.redis.process is not None
    at = time.monotonic() - began
    if mode == "pause":
        # Longer than the ingress waits for an outcome: calls in flight must come back IN_PROGRESS, not hang.
        down = OUTCOME_WAIT_MS / 1000 + rng.uniform(1.0, 3.0)
        os.kill(stack.redis.process.pid, signal.SIGSTOP)
        time.sleep(down)
        os.kill(stack.redis.process.pid, signal.SIGCONT)
    else:
        down = rng.uniform(0.5, 2.0)
        stack.redis.kill()
        time.sleep(down)
        stack.redis = EmbeddedRedis(stack.redis.data_dir, port=stack.redis.port).start()  # the AOF is replayed
    result.outages.append(Outage(mode, round(at, 2), round(down, 2)))


def _supervise(stack: Stack, tokens: Path, stop: threading.Event, result: RedisLoadResult) -> None:
    """What supervisord does in `interlock up`: an actor that exited is started again."""
    while not stop.wait(0.5):
        try:
            result.restarts += _restart_dead(stack, tokens)
        except (StackError, OSError):
            continue  # Redis is still down: the next round tries again


def _restart_dead(stack: Stack, tokens: Path) -> int:
    """Start every actor that exited again, once Redis is back (they would only exit again); returns how many."""
    redis_down = stack.redis is None or stack.redis.process is None or stack.redis.process.poll() is not None
    return 0 if redis_down else _restart_the_dead(stack, tokens)


def summarise(results: list[RedisLoadResult], *, command: str, commit: str) -> str:
    lines = [
        "## Redis dying under load",
        "",
        "Evidence: **real process** (redis-server with AOF, `appendfsync everysec`; sandbox rail; 2 gate workers, "
        "rail worker, reconciler, HTTP ingress; actors that exit are restarted as supervisord restarts them), "
        f"**scripted agent** (agents repeat every call until its answer is definite). Commit `{commit}`. "
        f"Reproduce: `{command}`.",
        "",
        "Why `everysec`, not `always`: nothing Interlock guarantees rests on Redis — the ledger decides (ADR 0007). "
        "A lost job or outcome costs a repeat, never money; `always` would fsync every enqueue for nothing.",
        "",
    ]
    for result in results:
        lines += [result.line(), ""]
        lines.append(f"Answers seen: {dict(result.answers)}; actor restarts: {result.restarts}; {result.seconds} s.")
        if result.violations:
            lines += ["", "Violations:", *[f"- {v}" for v in result.violations[:20]]]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
