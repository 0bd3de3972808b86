"""One chaos trial: a fresh data directory and real processes (redis-server, sandbox rail, rail worker,
gate worker, reconciler, HTTP ingress); one money call through a real MCP client; exactly one process
SIGKILLed at the chosen failpoint; restart what died; wait for recovery; observe; the agent retries
the same call; observe again."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis as redis_lib

from chaos import mutants
from chaos.cells import Cell
from chaos.verdict import NEEDS_NOTHING, Observation, judge
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.demo import DEMO_PAYEE
from deploy.redis_server import EmbeddedRedis
from deploy.stack import Actor, Stack, StackError, wait_for
from ingress.tokens import token_sha256
from interlock.errors import LedgerError
from interlock.queues import gates_queue, outcome_key, rail_queue, rq_queue
from interlock.sik import SETTLEMENT_SUBJECT
from interlock.tools import PAYOUT_TOOL
from ledger import audit
from ledger.db import open_ledger

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
MANDATE = REPO / "deploy" / "mandate.example.yaml"
AGENT, TOKEN = "agent_demo", "chaos-agent-token-0f1e2d3c"
AMOUNT = 50000
TIMINGS = {
    "INTERLOCK_RAIL_TIMEOUT_MS": "1000",
    "INTERLOCK_LEASE_TTL_MS": "2500",
    "INTERLOCK_RECONCILE_MIN_DELAY_MS": "1200",
    "INTERLOCK_RECONCILE_MAX_PASSES": "8",
    "INTERLOCK_OUTCOME_WAIT_MS": "2500",
}
ACTOR_OF = {"ingress": "ingress", "gate": "gate1", "rail": "rail", "reconciler": "reconciler"}
RESTART_ARGS = {"rail": ["rail-worker", "--wait-lease", "30"]}


@dataclass
class TrialResult:
    cell: str
    trial: int
    seed: int
    kill_landed: bool
    preempted: str | None
    first_answer: str
    after_recovery: str
    after_retry: str
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    data_dir: str = ""
    pause: dict[str, Any] = field(default_factory=dict)  # what a pause trial saw happen (chaos/pause.py)
    burst: dict[str, Any] = field(default_factory=dict)  # what a burst trial saw at its kill (chaos/burst.py)
    webhook: dict[str, Any] = field(default_factory=dict)  # what a webhook trial's agent was told (chaos/webhooks.py)


class Body(Protocol):
    """What a trial does with its stack, between setting up the data directory and killing everything."""

    def __call__(self, stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *,
                 proxy: bool) -> None: ...  # fmt: skip


def run_trial(cell: Cell, trial: int, seed: int, base: Path, *, mutation: str | None = None,
              keep: bool = False, proxy: bool = False, body: Body | None = None) -> TrialResult:  # fmt: skip
    started = time.monotonic()
    data = base / (f"{cell.key}-{trial}".replace("|", "-").replace(".", "_") + ("-proxy" if proxy else ""))
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    tokens = data / "tokens.yaml"
    tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n", encoding="utf-8")
    env = {"INTERLOCK_MANDATE": str(MANDATE), **TIMINGS, **cell.timings}
    if mutation:  # every process of the trial runs a patched copy of the tree (chaos/mutants.py)
        env.update(mutants.env_for(mutants.build(mutants.MUTANTS[mutation], base)))
    stack = Stack(data, env=env)
    result = TrialResult(cell.key + ("|proxy" if proxy else ""), trial, seed, False, None, "", "", "",
                         data_dir=str(data))  # fmt: skip
    try:
        (body or _run)(stack, cell, seed, tokens, result, proxy=proxy)
    except (StackError, TimeoutError, OSError) as exc:
        result.violations.append(f"HARNESS: {exc}"[:500])
    finally:
        stack.kill_all()
        result.seconds = round(time.monotonic() - started, 2)
        if not keep and not result.violations:
            shutil.rmtree(data, ignore_errors=True)
    return result


def _run(stack: Stack, cell: Cell, seed: int, tokens: Path, result: TrialResult, *, proxy: bool) -> None:
    stack.start_redis()
    sandbox_url = stack.start_sandbox(seed=seed)
    if proxy:
        _go_through_upstream(stack)
    control = SandboxControl(sandbox_url, stack.env["INTERLOCK_RAIL_KEY_ID"], stack.env["INTERLOCK_RAIL_KEY_SECRET"])
    payment_id = f"pay_chaos{seed}"
    control.add_payment(payment_id, 189900, prior_refunds=cell.prior_refunds)
    role = cell.point.split(".")[0]
    kill_at = {role: cell.point} if role in ("gate", "rail", "reconciler") else {}
    # The ingress imports the MCP SDK (slow): start it first and let it load while the engine boots.
    url = stack.start_ingress(tokens_file=tokens, kill_at=cell.point if role == "ingress" else None, wait=False)
    stack.start_engine(kill_at=kill_at)
    stack.wait_for_ingress()
    control.set_faults(cell.faults, seed=seed)
    redis_killer = _RedisKiller(stack) if role == "redis" else None
    arguments = {"payment_id": payment_id, "amount": AMOUNT}
    first = asyncio.run(_call(url, arguments))
    result.first_answer = first.get("state") or first.get("error", "?")
    if any(f["name"] == "partition" for f in cell.faults):
        _end_partition_after_one_period(control, cell)
    # The kill: wait for it to land (the process exits by SIGKILL at its failpoint).
    if role == "redis":
        assert redis_killer is not None
        result.kill_landed = redis_killer.done.wait(15) and redis_killer.killed
        if result.kill_landed:
            assert stack.redis is not None
            stack.redis = EmbeddedRedis(stack.redis.data_dir, port=stack.redis.port).start()
    else:
        result.kill_landed, result.preempted = _until_killed(stack, ACTOR_OF[role], cell.point, url, arguments, first)
    _restart_the_dead(stack, tokens)
    partition = cell.fault == "partition"
    result.after_recovery = _settle_and_observe(stack, control, payment_id, partition, result, "after recovery")
    # The agent repeats the same call, with a fresh request id, until it gets a definite answer.
    for _ in range(6):
        again = asyncio.run(_call(url, arguments))
        if again.get("state") not in (None, "IN_PROGRESS", "UNKNOWN"):
            break
        time.sleep(0.5)
    _restart_the_dead(stack, tokens)
    result.after_retry = _settle_and_observe(stack, control, payment_id, partition, result, "after retry")
    if not result.kill_landed and result.preempted is None:
        result.violations.append(f"KILL_NOT_LANDED: {cell.point} was reachable and the process did not die there")
    control.close()


KILL_ATTEMPTS = 3  # calls made, the first included, to bring a call to the failpoint
RETRY_PAUSE_S = 1.0  # between a refused call and the agent's repeat: a refusal under load tends to repeat at once


def _until_killed(stack: Stack, name: str, point: str, url: str, arguments: dict[str, Any],
                  first: dict[str, Any]) -> tuple[bool, str | None]:  # fmt: skip
    """Whether actor *name* died at *point*, and if not, what pre-empted the call. The agent does what its answer
    says: a call refused before the rail with RETRY_SAME_CALL (BLOCKED G2_RAIL_UNAVAILABLE when, on a loaded machine,
    the gate's payment read outlasts the rail timeout; or an ingress error that enqueued nothing) is made again, up to
    KILL_ATTEMPTS calls in all, since only a call that reaches the rail worker can reach a rail failpoint. Any other
    answer — IN_PROGRESS, no answer at all (the call may still be on its way), a definite result — is waited on for
    the kill, and a kill that does not come is not pre-empted unless the gates BLOCKED the call (`_preemption`)."""
    actor, answer = stack.actors[name], first
    client = redis_lib.Redis.from_url(stack.redis_url or "", socket_connect_timeout=1, decode_responses=True)
    try:
        return _wait_or_call_again(actor, point, url, arguments, answer, client)
    finally:
        client.close()


def _wait_or_call_again(actor: Actor, point: str, url: str, arguments: dict[str, Any], answer: dict[str, Any],
                        client: redis_lib.Redis) -> tuple[bool, str | None]:  # fmt: skip
    for attempt in range(1, KILL_ATTEMPTS + 1):
        deadline = time.monotonic() + 90
        while answer.get("state") != "BLOCKED" and actor.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
            published = _published_outcome(client)  # the call's own answer, after the ingress stopped waiting
            if published.get("state") == "BLOCKED":
                answer = published
        if not actor.alive():
            return died_at(actor, point, timeout_s=1), None
        refused = _retryable_refusal(answer)
        if refused is None:
            return False, _preemption(answer)
        if attempt == KILL_ATTEMPTS:
            landed = died_at(actor, point, timeout_s=5)  # a kill that an earlier call set off may land late
            return landed, None if landed else f"each of {KILL_ATTEMPTS} calls was refused before the rail ({refused})"
        time.sleep(RETRY_PAUSE_S)
        answer = asyncio.run(_call(url, arguments))
    raise AssertionError("unreachable")


def _retryable_refusal(answer: dict[str, Any]) -> str | None:
    """What refused the call before the rail so that the agent makes the same call again, or None: a BLOCKED answer or
    an ingress error result, either with caller_action RETRY_SAME_CALL. No answer at all is not one: the call may
    have reached the rail."""
    if answer.get("caller_action") != "RETRY_SAME_CALL":
        return None
    if answer.get("state") == "BLOCKED":
        return f"BLOCKED {answer.get('reason_code')}"
    error = answer.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')}"
    return None


def died_at(actor: Actor, point: str, timeout_s: float = 90) -> bool:
    """Whether *actor* dies within *timeout_s* by SIGKILL at its failpoint *point* (as its log says). A deadline, not a
    measure: on two busy CPUs a proxy-mode call (the gate's read and the rail worker's session, both over MCP) has
    taken longer than 15 s to reach a rail failpoint, and once (load 8) longer than 45 s."""
    try:
        wait_for(lambda: not actor.alive(), timeout=timeout_s, what=f"the kill at {point}")
    except StackError:
        return False
    return actor.returncode() == -9 and f"failpoint {point}: SIGKILL" in actor.log()


SETTLEMENT_BALANCE = 5_000_000
PAYOUT_PAYEE = DEMO_PAYEE  # the one payee deploy/mandate.example.yaml names


def one_money_call(control: SandboxControl, tool: str, payment_id: str) -> tuple[str, dict[str, Any]]:
    """The subject and arguments of one money call of *tool*, with the sandbox made ready for it: a refund on a
    fresh payment *payment_id*, or an instant settlement from a funded balance."""
    if tool == "create_refund":
        control.add_payment(payment_id, 189900)
        return payment_id, {"payment_id": payment_id, "amount": AMOUNT}
    if tool == PAYOUT_TOOL:
        return PAYOUT_PAYEE, payout_arguments(control)
    control.set_balance(SETTLEMENT_BALANCE)
    return SETTLEMENT_SUBJECT, {"amount": AMOUNT}


def payout_arguments(control: SandboxControl, **extra: Any) -> dict[str, Any]:
    """A payout to the demo mandate's one payee, with the sandbox's RazorpayX account funded for it."""
    control.add_fund_account(PAYOUT_PAYEE)
    control.set_banking_balance(SETTLEMENT_BALANCE)
    return {"fund_account_id": PAYOUT_PAYEE, "amount": AMOUNT, "currency": "INR", "mode": "IMPS",
            "purpose": "vendor bill", **extra}  # fmt: skip


def _end_partition_after_one_period(control: SandboxControl, cell: Cell) -> None:
    """A partition fault at rate 1.0 would start a new outage on every later money call and never heal;
    the experiment is one outage. Let the period that started run out, then drop the profile."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if control.faults().get("partition_remaining_ms", 0) == 0:
            break
        time.sleep(0.05)
    control.set_faults([f for f in cell.faults if f["name"] != "partition"])


def _go_through_upstream(stack: Stack) -> None:
    """Proxy mode: the sandbox's MCP front becomes the rail, and the mandate pins what it serves now."""
    import yaml

    from rails.upstream_manifest import current_pins

    front = stack.start_upstream()
    current = current_pins(front)
    mandate = yaml.safe_load(MANDATE.read_text(encoding="utf-8"))
    mandate["provenance"] = {"server_id": "sandbox-mcp-front",
                             "pinned_manifests": {name: {"sha256": digest} for name, digest in current.items()}}
    path = stack.data_dir / "mandate.yaml"
    path.write_text(yaml.safe_dump(mandate), encoding="utf-8")
    stack.env["INTERLOCK_MANDATE"] = str(path)


async def _call(url: str, arguments: dict[str, Any], tool: str = "create_refund") -> dict[str, Any]:
    try:
        async with mcp_client(url, TOKEN, timeout_s=30) as client:
            return structured(await client.call_tool(tool, arguments))
    except Exception as exc:  # noqa: BLE001 - the ingress may die under us: that is the experiment
        return {"error": type(exc).__name__}


def _preemption(first: dict[str, Any]) -> str | None:
    if first.get("state") == "BLOCKED":
        return f"the gates blocked the call ({first.get('reason_code')}), so the rail was never called"
    return None


def _published_outcome(client: redis_lib.Redis) -> dict[str, Any]:
    """An Outcome published for a call after the ingress stopped waiting for it (its answer was IN_PROGRESS), taken
    off its list so it is read once; {} when there is none (or Redis is down: a Redis kill is a trial of its own)."""
    try:
        for key in client.scan_iter(match=outcome_key("*")):
            item = client.rpop(key)
            if isinstance(item, str):
                outcome: dict[str, Any] = json.loads(item)
                return outcome
    except redis_lib.RedisError:
        pass
    return {}


def _restart_the_dead(stack: Stack, tokens: Path, *, leave: frozenset[str] = frozenset()) -> int:
    """Start every actor that exited again (not the sandbox, nor those in *leave*); returns how many."""
    restarted = 0
    for name, actor in list(stack.actors.items()):
        if actor.alive() or name in leave or name == "sandbox":
            continue
        restarted += 1
        if name == "ingress":
            port = int(actor.args[actor.args.index("--port") + 1])
            stack.start_ingress(tokens_file=tokens, port=port)
        else:
            stack.start_actor(name, RESTART_ARGS.get(name, actor.args[3:]))
    return restarted


def _settle_and_observe(stack: Stack, control: SandboxControl, payment_id: str, partition: bool,
                        result: TrialResult, moment: str) -> str:  # fmt: skip
    _settle_all(stack, [payment_id], partition=partition)
    obs = _observe_all(stack, control, [payment_id], partition=partition)
    for violation in judge(obs):
        result.violations.append(f"{moment}: {violation}")
    return obs.summary()


def _settle_all(stack: Stack, payment_ids: list[str], *, partition: bool = False, timeout_s: float = 60) -> bool:
    """Wait until every intent on these payments needs nothing more and both queues are empty, three
    polls in a row (a deadline, not a sleep). False when the deadline passed first."""
    allowed = NEEDS_NOTHING | ({"QUARANTINED"} if partition else set())

    def settled() -> bool:
        if any(i["state"] not in allowed for i in _intents(stack, payment_ids)):
            return False
        try:
            client = redis_lib.Redis.from_url(stack.redis_url or "", socket_connect_timeout=1)
            busy = rq_queue(gates_queue(), client).count + rq_queue(rail_queue(), client).count
        except redis_lib.RedisError:
            return False  # Redis may be restarting
        return busy == 0

    deadline = time.monotonic() + timeout_s
    stable = 0
    while time.monotonic() < deadline and stable < 3:
        stable = stable + 1 if settled() else 0
        time.sleep(0.4)
    return stable >= 3


def ledger_rows(stack: Stack, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of a read-only query on the stack's ledger; none while the ledger does not exist yet."""
    if not stack.ledger_path.exists():
        return []
    try:
        conn = open_ledger(stack.ledger_path, readonly=True)
    except LedgerError:
        return []
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def _intents(stack: Stack, payment_ids: list[str]) -> list[dict[str, Any]]:
    marks = ",".join("?" for _ in payment_ids)
    return ledger_rows(stack, f"SELECT sik, state, rail_entity_id FROM intents WHERE subject_id IN ({marks})",
                       tuple(payment_ids))


def _observe_all(stack: Stack, control: SandboxControl, payment_ids: list[str], *,
                 partition: bool = False) -> Observation:  # fmt: skip
    """*payment_ids* are the intents' subjects: payment ids, or SETTLEMENT_SUBJECT for the balance."""
    stamped: dict[str, list[str]] = {}
    for record in control.entities():
        entity = record["entity"]
        sik = entity_stamp(entity)
        if sik and subject_of(record) in payment_ids:
            stamped.setdefault(sik, []).append(entity["id"])
    bad = None
    if stack.ledger_path.exists():
        conn = open_ledger(stack.ledger_path, readonly=True)
        try:
            bad = audit.verify_chain(conn)
        finally:
            conn.close()
    return Observation(_intents(stack, payment_ids), stamped, bad, partition)


def entity_stamp(entity: dict[str, Any]) -> str | None:
    """The SIK a rail entity carries (notes.interlock_sik, or a refund's receipt / a payout's reference_id
    "ilk_"+SIK), or None."""
    notes = entity.get("notes")
    stamp = notes.get("interlock_sik") if isinstance(notes, dict) else None
    reference = entity.get("receipt") or entity.get("reference_id") or ""
    return stamp or reference.removeprefix("ilk_") or None


def subject_of(record: dict[str, Any]) -> str | None:
    """The intent subject a sandbox journal record belongs to: its payment, the balance a settlement draws, or the
    payee of a payout."""
    if record.get("kind") == "settlement":
        return SETTLEMENT_SUBJECT
    if record.get("kind") == "payout":
        payee: str | None = record["entity"].get("fund_account_id")
        return payee
    payment_id: str | None = record["entity"].get("payment_id")
    return payment_id


class _RedisKiller(threading.Thread):
    """SIGKILLs redis-server the moment the ledger shows the money call IN_FLIGHT (redis.during_call)."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True, name="redis-killer")
        self.stack = stack
        self.done = threading.Event()
        self.killed = False
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + 15
        try:
            while time.monotonic() < deadline:
                if self.stack.ledger_path.exists():
                    try:
                        conn = open_ledger(self.stack.ledger_path, readonly=True)
                    except Exception:  # noqa: BLE001 - schema not there yet
                        time.sleep(0.01)
                        continue
                    try:
                        flying = conn.execute("SELECT 1 FROM intents WHERE state = 'IN_FLIGHT'").fetchone()
                    finally:
                        conn.close()
                    if flying and self.stack.redis is not None:
                        self.stack.redis.kill()
                        self.killed = True
                        return
                time.sleep(0.01)
        finally:
            self.done.set()


def run_mutant_cell(cell_key: str, tree: Path, seed: int) -> list[str]:
    """One kill-matrix trial of *cell_key* whose processes run the mutated copy *tree*; its violations."""
    from chaos.cells import build_cells

    cell = {c.key: c for c in build_cells()[0]}[cell_key]
    name = tree.name.removeprefix("mutant-")
    result = run_trial(cell, 0, seed, tree.parent, mutation=name)  # the trial finds the same copy there
    return result.violations
