"""The gate job: a Proposal from queue "gates" in, a Decision on the rail queue out (SPEC §2).

Gate workers hold no state between jobs that matters for correctness: the runtime below caches
connections only. The ledger is opened read-only. A job delivered twice produces the same
Decision (same request_id) and the rail worker's admit makes the second one harmless: the queue
delivers, the ledger decides.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from gate_workers.context import GateContext, ResolvedAction
from gate_workers.gates.g5_purpose import PurposeJudge
from gate_workers.ladder import evaluate
from gate_workers.resolve import RailReader, resolve
from gate_workers.task_binding import bind_task
from interlock.canonical import canonical_hash
from interlock.clock import now_ms
from interlock.config import Settings, load_settings
from interlock.errors import LedgerError, MisroutedCall
from interlock.failpoints import failpoint
from interlock.mandate import Mandate, MandateStore
from interlock.messages import Decision, IntentTerms, Proposal, Trace, trace_now
from interlock.producer import enqueue
from interlock.queues import ADMIT_JOB, rail_queue, rq_queue
from interlock.redis_conn import connect
from interlock.shards import ShardMap, load_shard_map
from interlock.tools import current_pins
from ledger import ownership
from ledger.db import open_ledger
from ledger.queries import PAYOUT_TOOL, SETTLEMENT_TOOL, applied_mark
from rails.base import RAIL_MCP_UPSTREAM, make_rail
from rails.mcp_upstream import FETCH_BALANCE, NO_PAYOUTS
from rails.razorpay import RailError
from rails.upstream_manifest import ManifestCache, ToolLister
from rails.upstream_tools import ToolMap

logger = logging.getLogger(__name__)

LEDGER_WAIT_S = 60.0  # a gate worker started before the rail worker waits this long for it to create the ledger


@dataclass
class GateRuntime:
    settings: Settings
    mandates: MandateStore
    rail: RailReader
    ledger: sqlite3.Connection
    redis: redis.Redis
    tool_hashes: dict[str, str]
    # Proxy mode: the upstream's manifest, which G6 judges instead of Interlock's own catalogue.
    upstream: ManifestCache | None = None
    rail_queues: dict[str, Any] = field(default_factory=dict)
    # G5's model, loaded once here when a mandate turns purpose_check on (ADR 0006); None while none does.
    purpose_judge: PurposeJudge | None = None
    # Set when proposals run on a thread pool: each thread then opens its own read-only connection here.
    ledger_path: Path | None = None
    # INTERLOCK_SHARDS, when this shard's actors are given it: a second check of the ingress's routing.
    shard_map: ShardMap | None = None
    _readers: threading.local = field(default_factory=threading.local, repr=False)

    def reader(self) -> sqlite3.Connection:
        """The ledger, read-only, for the calling thread: a sqlite3 connection never crosses threads."""
        if self.ledger_path is None:
            return self.ledger
        conn: sqlite3.Connection | None = getattr(self._readers, "ledger", None)
        if conn is None:
            conn = self._readers.ledger = _open_when_present(self.ledger_path, LEDGER_WAIT_S)
        return conn

    def rail_queue(self, shard: str) -> Any:
        """The shard's RQ rail queue, built once per worker rather than once per job."""
        queue = self.rail_queues.get(shard)
        if queue is None:
            queue = self.rail_queues[shard] = rq_queue(rail_queue(shard), self.redis)
        return queue

    @classmethod
    def from_settings(cls, settings: Settings, *, wait_for_ledger_s: float = LEDGER_WAIT_S) -> GateRuntime:
        ledger_path: Path = settings.require("ledger")
        rail = make_rail(settings)
        upstream = None
        if settings.rail == RAIL_MCP_UPSTREAM:
            assert isinstance(rail, ToolLister)
            upstream = ManifestCache(rail, ttl_ms=settings.upstream_manifest_ttl_ms)
        mandates = MandateStore.from_settings(settings)
        judge = load_purpose_judge(mandates)  # before the ledger wait: a worker that cannot judge fails at once
        return cls(
            settings=settings,
            mandates=mandates,
            rail=rail,
            ledger=_open_when_present(ledger_path, wait_for_ledger_s),
            redis=connect(settings.redis_url),
            tool_hashes=current_pins(),
            upstream=upstream,
            ledger_path=ledger_path,
            purpose_judge=judge,
            shard_map=_shard_map(settings),
        )

    def gate_context(self, mandate: Mandate | None, now: int) -> GateContext:
        """G6 judges Interlock's own tools, or in proxy mode what the upstream serves now (SPEC §7)."""
        account, sharing = self.mandates.rail_account_id, self.account_merchants(mandate)
        if self.upstream is None:
            return GateContext(mandate=mandate, now_ms=now, ledger=self.reader(), tool_hashes=self.tool_hashes,
                               purpose_judge=self.purpose_judge, rail_account_id=account,
                               account_merchants=sharing, clock_skew_ms=self.settings.clock_skew_ms)  # fmt: skip
        try:
            hashes = self.upstream.hashes()
        except RailError as exc:
            # Fail closed: with no manifest every upstream tool is unknown to G6 (and G2 cannot read either).
            logger.warning("upstream manifest unavailable: %s", exc)
            hashes = {}
        return GateContext(mandate=mandate, now_ms=now, ledger=self.reader(), tool_hashes=hashes,
                           upstream_tools=frozenset(hashes), purpose_judge=self.purpose_judge,
                           rail_account_id=account, account_merchants=sharing,
                           clock_skew_ms=self.settings.clock_skew_ms)  # fmt: skip

    def account_merchants(self, mandate: Mandate | None) -> tuple[str, ...]:
        """The merchants on *mandate*'s rail account, whose money in motion G2 counts together (ADR 0021)."""
        return self.mandates.account_merchants(mandate) if mandate is not None else ()

    def missing_balance_read(self) -> str | None:
        """What the rail lacks when it is known to offer no balance read: in proxy mode, an upstream that
        lists no balance tool (razorpay-mcp-server has none), or a tool map that names none. An unreadable
        manifest is not such knowledge."""
        if self.upstream is None:
            return None
        tool_map = getattr(self.rail, "tools", None)
        name = tool_map.fetch_balance if isinstance(tool_map, ToolMap) else FETCH_BALANCE
        if name is None:
            return "a balance read: INTERLOCK_UPSTREAM_TOOLS maps fetch_balance to no upstream tool"
        try:
            tools = self.upstream.tools()
        except RailError:
            return None  # the read itself then fails as an outage, and G6 fails closed
        if name in tools:
            return None
        return f"a balance read: the upstream MCP server lists no {name!r} tool"


def load_purpose_judge(mandates: MandateStore) -> PurposeJudge | None:
    """G5's judge when any mandate turns purpose_check on, loaded now (once per worker); None when none does.

    Raises PurposeModelUnavailable, naming the `purpose` extra, when it is asked for and not installed: a worker
    that cannot run a check a mandate asks for refuses to start rather than skip it."""
    wanting = sorted(m.mandate_id for m in mandates.as_dict().values() if m.purpose_check.mode != "off")
    if not wanting:
        return None
    from gate_workers.purpose_model import load_judge

    started = time.monotonic()
    judge = load_judge()
    logger.info("G5 purpose judge %s loaded in %.2f s for mandates %s", judge.embedder.name,
                time.monotonic() - started, ", ".join(wanting))  # fmt: skip
    return judge


def _shard_map(settings: Settings) -> ShardMap | None:
    if settings.shards is None:
        return None
    shard_map = load_shard_map(settings.shards)
    shard_map.get(settings.shard)  # INTERLOCK_SHARD must be one of the map's shards (ConfigError naming them)
    return shard_map


def check_route(rt: GateRuntime, proposal: Proposal) -> None:
    """Refuse a proposal whose merchant the map puts on another shard (SPEC §15: its intents live in exactly
    one ledger). Nothing is decided or enqueued for it; the job fails, visibly, and the caller's wait ends
    in IN_PROGRESS — the repeat of the call, through a correctly configured ingress, is safe."""
    # The map this shard's ledger accepted (`interlock shards apply`) is newer than any file read at start, so a
    # gate worker follows a move without a restart; the rail worker's admission is the authoritative check.
    accepted = ownership.accepted(rt.reader())
    if accepted is not None:
        home = accepted.ownership.shard_of(proposal.merchant_id)
    elif rt.shard_map is not None:
        home = rt.shard_map.shard_of(proposal.merchant_id)
    else:
        return
    if home != rt.settings.shard:
        raise MisroutedCall(f"request {proposal.request_id}: merchant {proposal.merchant_id} belongs to shard {home}, "
                            f"not to this shard {rt.settings.shard}; an ingress routes by a stale or different map",
                            merchant_id=proposal.merchant_id, shard=rt.settings.shard, home=home)  # fmt: skip


def _open_when_present(path: Path, wait_s: float) -> sqlite3.Connection:
    # The rail worker creates the ledger; a gate worker started first waits for it rather than creating it.
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return open_ledger(path, readonly=True)
        except LedgerError:
            if time.monotonic() > deadline:
                raise
            logger.info("waiting for the ledger %s to be created by the rail worker", path)
            time.sleep(0.5)


_runtime: GateRuntime | None = None


def install_runtime(runtime: GateRuntime) -> None:
    global _runtime
    _runtime = runtime


def runtime() -> GateRuntime:
    global _runtime
    if _runtime is None:
        _runtime = GateRuntime.from_settings(load_settings())
    return _runtime


def evaluate_proposal(proposal_json: str) -> dict[str, Any]:
    """RQ job entry point (interlock.queues.GATE_JOB)."""
    return judge_proposal(runtime(), proposal_json)


def judge_proposal(rt: GateRuntime, proposal_json: str) -> dict[str, Any]:
    """Judge one Proposal and enqueue its Decision on this shard's rail queue."""
    dequeued = trace_now()
    proposal = Proposal.from_json(proposal_json)
    check_route(rt, proposal)
    proposal.trace["gate_dequeued"] = dequeued
    decision = decide(proposal, rt)
    failpoint("gate.after_resolve")
    # The ingress routed this merchant to this shard's Redis (SPEC §15): its rail worker is this shard's.
    queue = rt.rail_queue(rt.settings.shard)
    # One round trip of two commands: the job's hash, then its id on the queue (interlock.producer).
    pipe = rt.redis.pipeline(transaction=False)
    decision.trace["decision_enqueued"] = trace_now()  # serialised just below: the stamp travels with it
    enqueue(queue, ADMIT_JOB, decision.to_json(), job_id=f"decision-{proposal.request_id}", result_ttl=600,
            failure_ttl=86400, pipeline=pipe)  # fmt: skip
    pipe.execute()
    logger.info("request %s: %s %s (%s) sik=%s", proposal.request_id, proposal.tool, decision.verdict,
                decision.reason_code, decision.sik)  # fmt: skip
    return {"verdict": decision.verdict.value, "reason_code": decision.reason_code, "sik": decision.sik}


def decide(proposal: Proposal, rt: GateRuntime) -> Decision:
    now = now_ms()
    mandate = rt.mandates.get(proposal.agent_id)
    # The window is the call's own time (the ingress's received_at_ms), not when this worker got to it:
    # a job redelivered or picked up late must key the same settlement the same way (ADR 0009).
    missing = rt.missing_balance_read() if proposal.tool == SETTLEMENT_TOOL else None
    no_payouts = NO_PAYOUTS if proposal.tool == PAYOUT_TOOL and rt.upstream is not None else None
    # Before the rail read: every intent applied after this mark may be missing from it (finding F9).
    mark = applied_mark(rt.reader())
    action = resolve(proposal, rt.rail, rt.reader(), mandate, proposal.received_at_ms,
                     grace_ms=rt.settings.settlement_window_grace_ms, balance_read_missing=missing,
                     account_merchants=rt.account_merchants(mandate), payouts_missing=no_payouts,
                     clock_skew_ms=rt.settings.clock_skew_ms)  # fmt: skip
    action = bind_task(action, proposal, mandate, now)  # SPEC §10: verified here, judged by G1 and G2
    trace = {**proposal.trace, "rail_read_done": trace_now()}
    ctx = rt.gate_context(mandate, now)
    return build_decision(action, ctx, mandate, trace=trace, mandate_hash=rt.mandates.hash_of(proposal.agent_id),
                          applied_mark=mark)  # fmt: skip


def build_decision(action: ResolvedAction, ctx: GateContext, mandate: Mandate | None, *,
                   trace: Trace | None = None, mandate_hash: str | None = None,
                   applied_mark: int | None = None) -> Decision:  # fmt: skip
    """The ladder's verdict on *action*, as the Decision the rail worker admits; *trace* is the call's per-hop
    trace so far (interlock.messages.Trace), carried on; *mandate_hash* is the mandate's, when already known;
    *applied_mark* is the ledger's applied order as read before the rail read (ledger.queries.applied_mark)."""
    outcome = evaluate(action, ctx)
    if mandate_hash is None and mandate is not None:
        mandate_hash = mandate.mandate_hash
    terms = None
    if action.sik is not None:
        assert action.subject is not None and action.amount_minor is not None and action.currency is not None
        terms = IntentTerms(merchant_id=action.merchant_id, tool=action.tool, subject=action.subject,
                            amount_minor=action.amount_minor, currency=action.currency)  # fmt: skip
    return Decision(
        request_id=action.request_id, agent_id=action.agent_id, merchant_id=action.merchant_id, tool=action.tool,
        sik=action.sik, terms=terms, params=action.params, params_hash=canonical_hash(action.params),
        verdict=outcome.verdict, reason_code=outcome.reason_code, results=outcome.results,
        mandate_id=mandate.mandate_id if mandate else None, mandate_hash=mandate_hash,
        operation_ref=action.operation_ref, distinct_reason=action.distinct_reason, window=action.window,
        grace_siks=list(action.grace_siks), previous_sik=action.previous_sik, received_at_ms=action.received_at_ms,
        rail_basis_minor=_rail_basis(action), rail_read_at_ms=ctx.now_ms, applied_mark=applied_mark,
        decided_at_ms=ctx.now_ms, trace=dict(trace or {}), **_task_fields(action),
    )  # fmt: skip


def _task_fields(action: ResolvedAction) -> dict[str, Any]:
    """The verified task on the Decision: recorded with it, and its ceiling re-asserted at admit (SPEC §10)."""
    task = action.task
    if task is None:
        return {}
    grant = task.grant(action.tool)
    return {"task_id": task.task_id, "task_digest": task.digest, "task_expires_at": task.task.expires_at,
            "task_ceiling_minor": grant.max_amount_minor if grant is not None else None, "task_signer": task.signer,
            "task_merchant_id": task.audience.merchant_id,
            "task_agent_ids": list(task.audience.agent_ids)}  # fmt: skip


def _rail_basis(action: ResolvedAction) -> int | None:
    """G2's basis as read on the rail: what the payment still allows, the settlement balance, or the RazorpayX
    balance less the payouts it holds but has not debited yet."""
    if action.payment is not None:
        return action.payment.amount - action.payment.amount_refunded
    if action.balance is not None:
        return action.balance.balance
    if action.banking_balance is not None and action.params.get("queue_if_low_balance") is not True:
        return action.banking_balance.amount - action.payouts_waiting_minor
    return None
