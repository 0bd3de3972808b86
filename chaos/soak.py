"""A soak (issue 17): steady, moderate load for a fixed time while a random actor is SIGKILLed every 20-60 s
and started again (as supervisord would), the resident memory of every actor sampled throughout.

Bounded in time and started by a command (`interlock chaos --soak MINUTES`, `make soak`), never by
`make test`. At the end every intent must be definite and the usual verdict must hold (never two, the ledger
and the rail agree, the audit chain verifies). Growth per actor compares the median RSS of the first and the
last fifth of the run, across restarts (a restarted actor starts small again: growth is per process life).
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from chaos.crowd import Crowd, token_of
from chaos.redis_load import _restart_dead
from chaos.trial import _observe_all, _settle_all
from chaos.verdict import judge
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.stack import Stack, StackError

REFUND = 10_000
VICTIMS = ["rail", "gate1", "gate2", "reconciler", "ingress"]


@dataclass
class SoakResult:
    minutes: float
    calls: int = 0  # refunds answered definitely
    answers: Counter[str] = field(default_factory=Counter)
    kills: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, actor)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # actor -> (seconds, KiB)
    intents: int = 0
    entities: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def growth_kib(self) -> dict[str, tuple[int, int]]:
        """Actor -> (median RSS of the first fifth, of the last fifth) in KiB."""
        found = {}
        for name, samples in self.rss.items():
            if len(samples) < 10:
                continue
            fifth = max(1, len(samples) // 5)
            found[name] = (int(statistics.median(k for _, k in samples[:fifth])),
                           int(statistics.median(k for _, k in samples[-fifth:])))  # fmt: skip
        return found

    def line(self) -> str:
        return (f"soak: {self.minutes:g} min, {self.calls} refunds, {len(self.kills)} actors killed, "
                f"{self.intents} intents, {self.entities} entities, {len(self.violations)} violations")  # fmt: skip


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def run_soak(minutes: float, base: Path, *, agents: int = 4, seed: int = 1,
             kill_every_s: tuple[float, float] = (20, 60), sample_s: float = 5.0) -> SoakResult:  # fmt: skip
    rng = random.Random(seed)
    started = time.monotonic()
    names = [f"agent_soak{i}" for i in range(agents)]
    crowd = Crowd.prepare(base / "soak", names)
    stack, tokens, data = crowd.stack, crowd.tokens, crowd.stack.data_dir
    result = SoakResult(minutes)
    stop = threading.Event()
    try:
        crowd.start(seed=seed)
        control = crowd.control
        assert control is not None
        url = crowd.url
        until = time.monotonic() + minutes * 60
        threads = [threading.Thread(target=_sample, args=(stack, stop, result, started, sample_s), daemon=True),
                   threading.Thread(target=_kill_now_and_then, args=(stack, tokens, stop, result, rng, started,
                                                                     kill_every_s), daemon=True)]  # fmt: skip
        for thread in threads:
            thread.start()
        payments = asyncio.run(_load(url, names, control, until, result, seed))
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        _restart_dead(stack, tokens)
        _settle_all(stack, payments, timeout_s=180)
        obs = _observe_all(stack, control, payments)
        control.close()
        result.intents, result.entities = len(obs.intents), sum(len(v) for v in obs.stamped.values())
        result.violations += judge(obs)
    except (StackError, OSError) as exc:
        result.violations.append(f"HARNESS: {exc}"[:400])
    finally:
        stop.set()
        stack.kill_all()
        result.seconds = round(time.monotonic() - started, 1)
        if not result.violations:
            shutil.rmtree(data, ignore_errors=True)
    return result


async def _load(url: str, names: list[str], control: SandboxControl, until: float, result: SoakResult,
                seed: int) -> list[str]:  # fmt: skip
    """Each agent makes distinct refunds one after another (a moderate, steady load) until *until*."""
    payments: list[str] = []
    counter = [0]

    async def agent(name: str) -> None:
        while time.monotonic() < until:
            counter[0] += 1
            pid = f"pay_soak{seed}x{counter[0]}"
            await asyncio.to_thread(control.add_payment, pid, 500_000)
            payments.append(pid)
            while True:
                state = await _call(url, name, pid)
                result.answers[state] += 1
                if state not in ("IN_PROGRESS", "UNKNOWN") and not state.startswith("error:"):
                    result.calls += 1
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.2)

    await asyncio.gather(*(agent(name) for name in names))
    return payments


async def _call(url: str, name: str, pid: str) -> str:
    try:
        async with mcp_client(url, token_of(name), timeout_s=30) as client:
            answer = structured(await client.call_tool("create_refund", {"payment_id": pid, "amount": REFUND}))
    except Exception as exc:  # noqa: BLE001 - the ingress may be the actor just killed
        return f"error:{type(exc).__name__}"
    return str(answer.get("state") or "error:no state")


def _sample(stack: Stack, stop: threading.Event, result: SoakResult, started: float, every_s: float) -> None:
    while not stop.wait(every_s):
        now = round(time.monotonic() - started, 1)
        for name, actor in list(stack.actors.items()):
            if actor.alive():
                kib = rss_kib(actor.pid)
                if kib is not None:
                    result.rss.setdefault(name, []).append((now, kib))


def _kill_now_and_then(stack: Stack, tokens: Path, stop: threading.Event, result: SoakResult, rng: random.Random,
                       started: float, every: tuple[float, float]) -> None:  # fmt: skip
    while not stop.wait(rng.uniform(*every)):
        victim = rng.choice(VICTIMS)
        actor = stack.actors.get(victim)
        if actor is None or not actor.alive():
            continue
        actor.kill()
        result.kills.append((round(time.monotonic() - started, 1), victim))
        time.sleep(1.0)
        try:
            _restart_dead(stack, tokens)
        except (StackError, OSError) as exc:
            result.violations.append(f"HARNESS: restart after killing {victim}: {exc}"[:300])


def plot(result: SoakResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, samples in sorted(result.rss.items()):
        ax.plot([t / 60 for t, _ in samples], [k / 1024 for _, k in samples], label=name, linewidth=1.2)
    for at, _ in result.kills:
        ax.axvline(at / 60, color="grey", alpha=0.3, linewidth=0.8)
    ax.set_xlabel("minutes (grey lines: an actor SIGKILLed and restarted)")
    ax.set_ylabel("RSS, MiB")
    ax.set_title(f"Soak: resident memory per actor, {result.minutes:g} min")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summarise(result: SoakResult, *, command: str, commit: str, image: str | None) -> str:
    kills = Counter(v for _, v in result.kills)
    lines = [
        "## Soak (steady load, a random actor SIGKILLed every 20-60 s)",
        "",
        f"Evidence: **real process** (sandbox rail, Redis, 2 gate workers, rail worker, reconciler, HTTP ingress; "
        f"a killed actor is started again as supervisord would), **scripted agent**. Commit `{commit}`, "
        f"{result.seconds} s. Reproduce: `{command}`.",
        "",
        result.line(),
        "",
        f"Actors killed: {dict(kills)}. Answers: {dict(result.answers)}.",
        "",
        "| actor | RSS first fifth (MiB, median) | RSS last fifth (MiB, median) | growth |",
        "|---|---|---|---|",
    ]
    for name, (first, last) in sorted(result.growth_kib().items()):
        lines.append(f"| {name} | {first / 1024:.1f} | {last / 1024:.1f} | {(last - first) / 1024:+.1f} MiB |")
    if image:
        lines += ["", f"![soak RSS]({image})"]
    if result.violations:
        lines += ["", "Violations:", *[f"- {v}" for v in result.violations[:20]]]
    return "\n".join(lines) + "\n"
