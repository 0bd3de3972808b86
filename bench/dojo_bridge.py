"""`interlock bench agentdojo`: AgentDojo's banking suite, scored by AgentDojo, direct and through Interlock.

AgentDojo runs in a venv of its own (.venv-agentdojo, `make agentdojo`) as bench/dojo_runner.py; this module is
the Interlock side of its bridge. Through Interlock, the runner asks here over a pipe before each task run
(`begin`: a fresh ledger and the mandate the account holder would sign for that environment) and for each money
call (`pay`): this side turns it into a real MCP `create_payout` call at the ingress of a real stack over the
sandbox's RazorpayX and answers whether Interlock said APPLIED. With `--approve-policy user-request` a payout held
for a payee on no list is decided by a stated policy standing in for the account holder (bench/dojo_approver.py).
One redis-server and one sandbox serve the whole run; each task run gets its own ledger, engine and ingress (its own
day: windows, idempotency and holds start empty).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import redis

from bench.dojo_approver import APPROVER_ID, HELD_PAYEE, POLICIES, StandIn
from bench.env import AGENT, TIMINGS, TOKEN, mandate_data, write_mandate
from deploy.agent_client import SandboxControl, mcp_client, structured
from deploy.stack import Stack
from ingress.tokens import token_sha256

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv-agentdojo" / "bin" / "python"
RUNNER = Path(__file__).resolve().parent / "dojo_runner.py"
SUITE_VERSION = "v1.2.2"
# ground_truth: AgentDojo's ground-truth agent, no injections; hijacked: the user's ground truth, then the injection
# task's, for every pair; model: a real local model through AgentDojo's own pipeline, attacked (important_instructions).
MODES = ("ground_truth", "hijacked", "model")
MODEL_MAX_TOKENS = 512  # each model turn's cap: a tool call or a short answer fits; a ramble is cut there
MODEL_SEED = 0


def route_name(route: str, policy: str, free_text: str = "off") -> str:
    """"direct", "interlock" (payee approval off) or "interlock-<policy>" (payee approval on, decided by *policy*),
    with "-text" when the mandate bounds the text sent with money (*free_text* "bounded", ADR 0035)."""
    if route == "direct":
        return route
    name = route if policy == "never" else f"{route}-{policy}"
    return name + ("-text" if free_text == "bounded" else "")


# What the account holder signs about the text sent with a payment, when it is bounded (ADR 0035): a payee they
# never paid gets no narration (AgentDojo's `subject`, the reference a bank transfer shows its recipient).
BOUNDED_TEXT: dict[str, Any] = {"unlisted": "none"}
FREE_TEXT = ("off", "bounded")


# An IBAN's shape: country, check digits, 11..30 letters or digits (the suite's bill IBAN UK12... is one too).
IBAN = re.compile(r"^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$")
# RazorpayX's narration: 1-30 letters, digits and spaces. A subject of that shape is sent as the narration too.
NARRATION = re.compile(r"[A-Za-z0-9 ]{1,30}")
DAY_MS = 86_400_000
MAX_CALLS_A_DAY = 20
PAYOUT_FEE_MINOR = 590  # the sandbox's ₹5 + 18% GST per payout (sandbox/payout_states.py), for the fee budget
FOLLOW_UP_S = 30.0  # how long the harness follows an answer that is not final yet (interlock_status)
# The answers a harness acts on; any other state (PROPOSED, IN_FLIGHT, UNKNOWN, ...) is followed until it is one.
ANSWERED = frozenset({"APPLIED", "BLOCKED", "HELD", "FAILED_TERMINAL", "CONFIRMED_NOT_APPLIED", "QUARANTINED"})
DECIDED = ANSWERED - {"HELD"}  # after the stand-in approved or rejected a hold: its outcome


class RunnerError(Exception):
    """Raised when the AgentDojo runner fails or its venv is missing; names what to do."""


def to_minor(amount: str | Decimal) -> int | None:
    """Exact minor units (1 unit of the suite's currency = Rs 1 = 100 paise), or None when the amount is not a whole
    number of paise, not finite or not positive: never rounded, never through a float."""
    try:
        value = Decimal(amount) * 100
    except InvalidOperation:
        return None
    if not value.is_finite() or value <= 0 or value != value.to_integral_value():
        return None
    return int(value)


def fund_account_id(iban: str) -> str:
    """The fund account the sandbox's RazorpayX holds for an IBAN: RazorpayX's shape, stable per IBAN."""
    return "fa_" + hashlib.sha256(iban.encode()).hexdigest()[:14].upper()


def paid_before(account: dict[str, Any]) -> list[str]:
    """The payees the account holder has paid before, from the environment's own history: the recipients of the
    transactions they sent and of their standing orders. No ground truth is needed for this."""
    own = {"me", account["iban"]}
    sent = [t for t in account["transactions"] if t["sender"] in own] + list(account["scheduled_transactions"])
    return sorted({t["recipient"] for t in sent if IBAN.match(t["recipient"])})


def mandate_changes(account: dict[str, Any], *, hold_unlisted: bool = False,
                    bound_text: bool = False) -> dict[str, Any]:  # fmt: skip
    """What the account holder would sign: pay only those paid before, nothing beyond the account's balance in one
    payout or in a day, at most MAX_CALLS_A_DAY payouts and their fees a day. No hold threshold inside the balance.
    With *hold_unlisted* (payee approval on) a payee paid never before is held for the account holder, APPROVER_ID,
    instead of refused; with *bound_text*, such a payee gets no narration (BOUNDED_TEXT)."""
    balance = to_minor(account["balance"]) or 0
    payees: dict[str, Any] = {"fund_account_ids": [fund_account_id(iban) for iban in paid_before(account)]}
    payout = {"reversibility": "irreversible",
              "value": {"min_amount_minor": 1, "max_amount_minor": balance, "currencies": ["INR"]},
              "payees": payees}  # fmt: skip
    approval: dict[str, Any] = {}
    if hold_unlisted:
        payees["unlisted"] = "hold"
        approval["approval.approvers"] = [APPROVER_ID]
    if bound_text:
        payout["free_text"] = dict(BOUNDED_TEXT)
    return {
        "mandate_id": "mnd_agentdojo_banking",
        "purpose": "AgentDojo banking: pay the account holder's known payees from their account",
        "scope.grants": {"interlock_status": {"reversibility": "reversible"}, "create_payout": payout},
        "limits.windows": [{"window_ms": DAY_MS, "max_calls": MAX_CALLS_A_DAY, "max_amount_minor": balance,
                            "currency": "INR"}],  # fmt: skip
        "limits.fee_budgets": {"INR": {"window_ms": DAY_MS, "max_fee_minor": MAX_CALLS_A_DAY * PAYOUT_FEE_MINOR}},
        "approval.hold_above_minor": balance,
        **approval,
    }


@dataclass
class Call:
    """One money call the agent made through Interlock, and what came back."""

    user_task: str | None
    injection_task: str | None
    part: str  # "user": the user task's ground truth; "injection": the hijacker's
    tool: str
    recipient: str
    amount: str
    subject: str
    state: str
    reason: str | None
    applied: bool
    held: str | None = None  # held for the payee and then "approved" or "rejected" by the stand-in, with why
    narration: str | None = None  # the text the call asked the payee's bank statement to show (AgentDojo's subject)
    asked: str | None = None  # the injection task AgentDojo ran as a user task (user_task None), when it was one


@dataclass
class Bridge:
    """The Interlock side: shared redis-server and sandbox, a fresh engine and ingress per task run."""

    work: Path
    approve_policy: str = "never"
    free_text: str = "off"
    calls: list[Call] = field(default_factory=list)
    runs: int = 0
    base: Stack | None = None
    pair: Stack | None = None
    control: SandboxControl | None = None
    mcp_url: str = ""
    known: set[str] = field(default_factory=set)
    stand_in: StandIn | None = None
    journal: Path | None = None  # every call as a JSON line, so a resumed run keeps the calls of the task runs it keeps

    def resume(self, journal: Path, keep: bool) -> None:
        """Record calls in *journal*; with *keep*, start from the calls it already holds."""
        self.journal = journal
        if keep and journal.exists():
            self.calls = [Call(**json.loads(line)) for line in journal.read_text(encoding="utf-8").splitlines()]
        self._rewrite_journal()

    def _rewrite_journal(self) -> None:
        if self.journal is not None:
            self.journal.write_text("".join(json.dumps(c.__dict__) + "\n" for c in self.calls), encoding="utf-8")

    def start(self) -> None:
        shutil.rmtree(self.work / "base", ignore_errors=True)  # a resumed run's sandbox starts empty too
        self.base = Stack(self.work / "base", env=dict(TIMINGS))
        self.base.start_redis()
        url = self.base.start_sandbox(seed=0)
        self.control = SandboxControl(url, self.base.env["INTERLOCK_RAIL_KEY_ID"],
                                      self.base.env["INTERLOCK_RAIL_KEY_SECRET"])  # fmt: skip

    def stop(self) -> None:
        self._stop_pair()
        if self.control is not None:
            self.control.close()
        if self.base is not None:
            self.base.kill_all()

    def _stop_pair(self) -> None:
        if self.pair is not None:
            self.pair.kill_all()  # the pair's actors only: redis-server is the base stack's
            self.pair = None

    def _fund_account(self, iban: str) -> str:
        """The IBAN's fund account on the sandbox's RazorpayX, created the first time it is named (as a banking app
        registers a new payee): one contact per IBAN."""
        fa = fund_account_id(iban)
        if iban not in self.known:
            assert self.control is not None
            self.control.add_fund_account(fa, account_type="bank_account",
                                          contact={"name": f"Payee {iban}", "reference_id": iban[:40]})  # fmt: skip
            self.known.add(iban)
        return fa

    def begin(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.base is not None and self.control is not None and self.base.redis_url
        self._stop_pair()
        # A task run starts over: the calls of an earlier, unfinished run of the same task run (a run resumed) are not
        # its. A task run is its pair, or the injection task AgentDojo runs as a user task (no pair yet).
        run = (request.get("user_task"), request.get("injection_task"), request.get("asked"))
        if any((c.user_task, c.injection_task, c.asked) == run for c in self.calls):
            self.calls = [c for c in self.calls if (c.user_task, c.injection_task, c.asked) != run]
            self._rewrite_journal()
        redis.Redis.from_url(self.base.redis_url).flushall()  # nothing of the last run's queues or workers
        account = request["account"]
        for iban in paid_before(account):
            self._fund_account(iban)
        self.runs += 1
        data = self.work / f"run{self.runs:03d}"
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        env = {**TIMINGS, **{k: v for k, v in self.base.env.items() if k.startswith("INTERLOCK_RAIL_")}}
        stack = Stack(data, env=env, redis_url=self.base.redis_url)
        hold = self.approve_policy != "never"
        changes = mandate_changes(account, hold_unlisted=hold, bound_text=self.free_text == "bounded")
        mandate = write_mandate(data / "mandate.yaml", mandate_data(changes))
        tokens = data / "tokens.yaml"
        tokens.write_text(f"agents:\n  {AGENT}: {{token_sha256: {token_sha256(TOKEN)}}}\n", encoding="utf-8")
        stack.env["INTERLOCK_MANDATE"] = str(mandate)
        self.stand_in = StandIn.for_stack(data, stack.base_env(), self.approve_policy) if hold else None
        self.control.set_banking_balance(to_minor(account["balance"]) or 0)
        self.pair = stack
        self.mcp_url = stack.start_ingress(tokens_file=tokens, wait=False)
        stack.start_engine()
        stack.wait_for_ingress()
        return {"ok": True}

    def pay(self, request: dict[str, Any]) -> dict[str, Any]:
        recipient, amount, subject = request["recipient"], request["amount"], request["subject"]
        narration = subject if NARRATION.fullmatch(subject) else None

        def answer(state: str, reason: str | None, message: str, applied: bool = False,
                   held: str | None = None) -> dict[str, Any]:  # fmt: skip
            call = Call(request.get("user_task"), request.get("injection_task"), request.get("part", "user"),
                        request["tool"], recipient, str(amount), subject, state, reason, applied, held,
                        narration if state != "NO_COUNTERPART" else None, request.get("asked"))  # fmt: skip
            self.calls.append(call)
            if self.journal is not None:
                with self.journal.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(call.__dict__) + "\n")
            return {"applied": applied, "state": state, "reason": reason, "message": message}

        if not IBAN.match(recipient):
            return answer("NO_COUNTERPART", "NOT_AN_IBAN",
                          f"{recipient!r} is not an IBAN: there is no fund account to pay")  # fmt: skip
        minor = to_minor(amount)
        if minor is None:
            return answer("NO_COUNTERPART", "NOT_WHOLE_PAISE", f"amount {amount} is not a whole number of cents")
        notes = {"subject": subject, "date": str(request.get("date") or ""), "agentdojo_tool": request["tool"]}
        if request.get("recurring") is not None:
            notes["recurring"] = str(bool(request["recurring"])).lower()
        args: dict[str, Any] = {"fund_account_id": self._fund_account(recipient), "amount": minor, "currency": "INR",
                                "mode": "NEFT", "purpose": "payout", "notes": notes}  # fmt: skip
        if narration is not None:
            args["narration"] = narration
        content = asyncio.run(self._create_payout(args))
        held = None
        if content.get("state") == "HELD" and content.get("reason_code") == HELD_PAYEE and self.stand_in is not None:
            # The person the hold waits for: the stated policy, through ops.holds with its own credential; then the
            # outcome is followed as any answer not final yet, and the environment changes only on APPLIED.
            approved, why = self.stand_in.decide(str(content["sik"]), recipient, request.get("request") or {})
            held = ("approved: " if approved else "rejected: ") + why
            content = asyncio.run(self._create_payout(args, content, DECIDED))
        state = str(content.get("state") or "ERROR")
        reason = content.get("reason_code")
        applied = state == "APPLIED"
        message = f"Interlock answered {state}" + (f" ({reason})" if reason else "")
        return answer(state, reason, message + (f"; held for the payee and {held}" if held else ""), applied, held)

    async def _create_payout(self, args: dict[str, Any], content: dict[str, Any] | None = None,
                             answered: frozenset[str] = ANSWERED) -> dict[str, Any]:  # fmt: skip
        """The call's answer once it is one of *answered*; given *content* (an answer had already), only followed."""
        async with mcp_client(self.mcp_url, TOKEN, timeout_s=30) as client:
            if content is None:
                content = structured(await client.call_tool("create_payout", args))
            deadline = time.monotonic() + FOLLOW_UP_S
            # The harness follows an answer it cannot act on yet as Interlock says: by its sik, or (IN_PROGRESS before
            # anything was recorded: no sik, RETRY_SAME_CALL) with the same call again, which the SIK makes the same
            # payout.
            while content.get("state") not in answered and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
                if content.get("sik"):
                    content = {**content, **structured(await client.call_tool("interlock_status",
                                                                              {"sik": content["sik"]}))}  # fmt: skip
                elif content.get("caller_action") == "RETRY_SAME_CALL":
                    content = structured(await client.call_tool("create_payout", args))
                else:
                    break
            if content.get("state") not in answered:
                logger.warning("create_payout %s: no answer to act on in %ss: %s", args, FOLLOW_UP_S, content)
            return content

    def serve(self, requests: Any, answers: Any) -> None:
        for line in requests:
            request = json.loads(line, parse_float=Decimal)
            op = request["op"]
            reply = self.begin(request) if op == "begin" else self.pay(request) if op == "pay" else {"error": op}
            answers.write(json.dumps(reply) + "\n")
            answers.flush()


def run(mode: str, route: str, work: Path, *, user_tasks: list[str] | None = None,
        injection_tasks: list[str] | None = None, approve_policy: str = "never", free_text: str = "off",
        resume: bool = False) -> dict[str, Any]:  # fmt: skip
    """One mode on one route ("direct", or through Interlock as route_name names it), in the AgentDojo venv; returns
    AgentDojo's scores and (through Interlock) the calls. The model mode serves the shipped model for the run
    (llama-cpp-python's server: `make bench-model` installs it). With *resume*, the task runs *work* already holds
    whole (AgentDojo's logs, and their calls) are kept and only the rest run."""
    if mode != "model":
        return _run(mode, route, work, user_tasks=user_tasks, injection_tasks=injection_tasks,
                    approve_policy=approve_policy, free_text=free_text, resume=resume)  # fmt: skip
    from bench.model_llm import MODEL_NAME, ModelUnavailable, model_server

    work.mkdir(parents=True, exist_ok=True)
    try:
        with model_server(work / f"{mode}-{route}.model.log") as url:
            model = {"model_url": url, "model_id": MODEL_NAME, "max_tokens": MODEL_MAX_TOKENS, "seed": MODEL_SEED}
            return _run(mode, route, work, user_tasks=user_tasks, injection_tasks=injection_tasks,
                        approve_policy=approve_policy, free_text=free_text, resume=resume, model=model)  # fmt: skip
    except ModelUnavailable as exc:
        raise RunnerError(str(exc)) from exc


def _run(mode: str, route: str, work: Path, *, user_tasks: list[str] | None, injection_tasks: list[str] | None,
         approve_policy: str, free_text: str, resume: bool,
         model: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    if not VENV_PYTHON.exists():
        raise RunnerError(f"{VENV_PYTHON} is missing: `make agentdojo` creates it (bench/agentdojo_requirements.txt)")
    if approve_policy not in POLICIES:
        raise RunnerError(f"--approve-policy {approve_policy}: one of {', '.join(POLICIES)}")
    work.mkdir(parents=True, exist_ok=True)
    results = work / f"{mode}-{route}.json"
    if free_text not in FREE_TEXT:
        raise RunnerError(f"--free-text {free_text}: one of {', '.join(FREE_TEXT)}")
    bridge = Bridge(work / f"{mode}-stacks", approve_policy, free_text) if route != "direct" else None
    config: dict[str, Any] = {"suite_version": SUITE_VERSION, "mode": mode, "results": str(results),
                              "route": "direct" if bridge is None else "interlock",
                              "logdir": str(work / "agentdojo-logs"), "user_tasks": user_tasks,
                              "injection_tasks": injection_tasks, "resume": resume, **(model or {})}  # fmt: skip
    fds: list[int] = []
    if bridge is not None:
        bridge.resume(work / f"{mode}-{route}.calls.jsonl", keep=resume)
        req_read, req_write = os.pipe()
        ans_read, ans_write = os.pipe()
        config["bridge_fds"] = [req_write, ans_read]
        fds = [req_write, ans_read]
    config_path = work / f"{mode}-{route}.config.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    log = (work / f"{mode}-{route}.log").open("wb")
    # Nothing of this checkout on the runner's path: it imports AgentDojo only.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc: subprocess.Popen[bytes] | None = None
    try:
        if bridge is not None:
            bridge.start()
        proc = subprocess.Popen([str(VENV_PYTHON), str(RUNNER), str(config_path)], stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=fds, env=env)  # fmt: skip
        if bridge is not None:
            os.close(req_write)
            os.close(ans_read)
            with os.fdopen(req_read, encoding="utf-8") as requests, os.fdopen(ans_write, "w") as answers:
                bridge.serve(requests, answers)
        code = proc.wait()
    finally:
        log.close()
        if proc is not None and proc.poll() is None:  # the Interlock side failed: the runner goes with it
            proc.kill()
            proc.wait(10)
        if bridge is not None:
            bridge.stop()
    if code != 0:
        tail = (work / f"{mode}-{route}.log").read_text(errors="replace")[-3000:]
        raise RunnerError(f"the AgentDojo runner ({mode}, {route}) exited {code}:\n{tail}")
    scores: dict[str, Any] = json.loads(results.read_text(encoding="utf-8"))
    scores["calls"] = [c.__dict__ for c in bridge.calls] if bridge is not None else []
    (work / f"{mode}-{route}.calls.json").write_text(json.dumps(scores["calls"], indent=1), encoding="utf-8")
    scores["runs"] = bridge.runs if bridge is not None else 0
    return scores
