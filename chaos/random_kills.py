"""Random kills: a burst of concurrent money calls from several agents (some identical), one actor
SIGKILLed at a random moment, then restart, let the agents retry, and judge every intent."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.crowd import identities
from chaos.trial import TIMINGS, _observe_all, _restart_the_dead, _settle_all
from chaos.verdict import judge
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.stack import Stack, StackError

AGENTS = ["agent_demo", "agent_two", "agent_three"]
VICTIMS = ["rail", "gate1", "gate2", "reconciler", "ingress", "redis"]
FAULT_MIXES: list[list[dict[str, Any]]] = [
    [],
    [{"name": "ambiguous_504", "rate": 0.3}],
    [{"name": "dup_response", "rate": 0.3}],
    [{"name": "slow", "rate": 0.2, "params": {"delay_ms": 1500}}],
]


@dataclass
class RandomTrial:
    trial: int
    seed: int
    victim: str
    kill_after_s: float
    calls: int
    intents: int
    entities: int
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run_random_trial(trial: int, seed: int, base: Path, *, calls: int = 12) -> RandomTrial:
    rng = random.Random(seed)
    started = time.monotonic()
    data = base / f"random-{trial}"
    shutil.rmtree(data, ignore_errors=True)
    (data / "mandates").mkdir(parents=True)
    tokens = _agents(data)
    stack = Stack(data, env={"INTERLOCK_MANDATE_DIR": str(data / "mandates"), **TIMINGS}, gate_workers=2)
    victim, delay = rng.choice(VICTIMS), rng.uniform(0.0, 2.0)
    result = RandomTrial(trial, seed, victim, round(delay, 2), calls, 0, 0)
    try:
        stack.start_redis()
        sandbox = stack.start_sandbox(seed=seed)  # first: the ingress refuses to start without the rail's settings
        url = stack.start_ingress(tokens_file=tokens, wait=False)
        stack.start_engine()
        stack.wait_for_ingress()
        control = SandboxControl(sandbox, stack.env["INTERLOCK_RAIL_KEY_ID"], stack.env["INTERLOCK_RAIL_KEY_SECRET"])
        payments = [f"pay_rk{seed}x{i}" for i in range(max(2, calls // 3))]
        for pid in payments:
            control.add_payment(pid, 500000, prior_refunds=2)
        control.set_faults(rng.choice(FAULT_MIXES), seed=seed)
        # Identical calls from different agents land on one SIK: the business identity ignores the caller.
        plan = [(rng.choice(AGENTS), rng.choice(payments), rng.choice([10000, 20000])) for _ in range(calls)]
        asyncio.run(_burst(url, plan, stack, victim, delay))
        _restart(stack, tokens)
        asyncio.run(_retry_until_definite(url, plan))
        _restart(stack, tokens)
        _settle_all(stack, payments)
        obs = _observe_all(stack, control, payments)
        result.intents = len(obs.intents)
        result.entities = sum(len(v) for v in obs.stamped.values())
        result.violations = judge(obs)
        control.close()
    except (StackError, OSError) as exc:
        result.violations.append(f"HARNESS: {exc}"[:400])
    finally:
        stack.kill_all()
        result.seconds = round(time.monotonic() - started, 2)
        if not result.violations:
            shutil.rmtree(data, ignore_errors=True)
    return result


def _agents(data: Path) -> Path:
    return identities(data, AGENTS, token=_token)


def _token(agent: str) -> str:
    return f"random-kill-token-{agent}"


async def _one(url: str, agent: str, payment: str, amount: int) -> dict[str, Any]:
    try:
        async with mcp_client(url, _token(agent), timeout_s=30) as client:
            return structured(await client.call_tool("create_refund", {"payment_id": payment, "amount": amount}))
    except Exception as exc:  # noqa: BLE001 - the ingress or Redis may be killed under us
        return {"error": type(exc).__name__}


async def _burst(url: str, plan: list[tuple[str, str, int]], stack: Stack, victim: str, delay: float) -> None:
    async def killer() -> None:
        await asyncio.sleep(delay)
        if victim == "redis":
            if stack.redis is not None:
                stack.redis.kill()
        else:
            stack.actors[victim].kill()

    await asyncio.gather(killer(), *(_one(url, *call) for call in plan))


async def _retry_until_definite(url: str, plan: list[tuple[str, str, int]]) -> None:
    for call in plan:
        for _ in range(8):
            answer = await _one(url, *call)
            if answer.get("state") not in (None, "IN_PROGRESS", "UNKNOWN"):
                break
            await asyncio.sleep(0.5)


def _restart(stack: Stack, tokens: Path) -> None:
    from deploy.redis_server import EmbeddedRedis

    if stack.redis is not None and (stack.redis.process is None or stack.redis.process.poll() is not None):
        stack.redis = EmbeddedRedis(stack.redis.data_dir, port=stack.redis.port).start()
    _restart_the_dead(stack, tokens)
