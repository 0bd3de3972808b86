"""A ledger restored from its replica is served only after the rail has said what the lost tail did (ADR 0029).

Litestream's replica may lag the lost primary by up to its sync interval. In that tail the primary may have admitted
and sent calls, released holds, reopened refused calls — and the agents were told so, or are still waiting. The
protocol, run once on the restored file before any rail worker may take its lease:

1. The audit chain must verify (a broken one is not served).
2. RESTORE_STARTED is audited (the last seq and commit the replica holds, the rail window to re-read). From then on
   the rail worker refuses to boot on this ledger until RESTORE_FINISHED follows (`pending`). Every console session
   the replica holds is revoked with it: the lost tail may have held its logout.
3. Every intent the replica shows in motion (AUTHORIZED, IN_FLIGHT, RECONCILING) becomes UNKNOWN: the reconciler
   reads its stamp, as after any crash. Nothing restored is ever executed from AUTHORIZED.
4. The rail's lists — refunds, instant settlements, each payout account's payouts — are paged newest first until
   they are older than the last commit less a margin, once at once and once more no earlier than the restore's
   start plus the rail's call deadline plus the reconciler's minimum delay; refunds and payouts, which the rail may
   list up to one more delay late (ADR 0026), once more, finally, a delay after that. The restore runs only once
   the old machine is fenced (powered off, or cut off from the rail), so no call of the lost tail left after the
   restore started; one that left just before may be applied up to its deadline later and listed up to the delay
   after that (ADR 0010's bound), and the final read sees it. The replica's lease says nothing here: the lost
   machine may have renewed it after the replica's last commit. Every entity with our stamp is judged against the
   ledger:
   * a SIK the ledger never saw: recorded as its intent, APPLIED, on the entity's terms (RECOVERED_FROM_RAIL), under
     the merchant and agent it can only belong to — so the agent's repeat (the same SIK) lands on it;
   * a known SIK held, refused or confirmed absent in the replica, on our terms: APPLIED (the tail released or
     reopened and sent it); on other terms: QUARANTINED for a person;
   * anything else (APPLIED already, UNKNOWN for the reconciler): left as it is.
   Whose it is, the entity's notes say (interlock_merchant, interlock_agent), whatever that agent's mandate grants
   now: a mandate replaced since the tail sent the call may no longer grant its tool, and the money still moved
   (finding F-loss-1). One sent before owners were stamped belongs to the only mandate granting its tool. A stamped
   entity that cannot be attributed to exactly one (merchant, agent) of this shard stops the restore. Every payout
   account a mandate of the shard names is read, whether or not that mandate grants payouts now.
5. RESTORE_FINISHED is audited with what was recovered.

Serving with UNKNOWN intents is as safe as after any crash: a repeat lands on its intent, G2 and G3 count it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from interlock import clock
from interlock.canonical import canonical_json, sha256_hex
from interlock.config import Settings
from interlock.errors import AuditChainBroken, InterlockError
from interlock.mandate import Mandate
from interlock.sik import stamped_owner, stamped_siks
from interlock.terms import REFUND_TOOL, entity_terms, terms_mismatch
from interlock.tools import PAYOUT_TOOL
from ledger import audit, console_sessions, intents
from ledger.db import transaction
from ledger.queries import SETTLEMENT_TOOL
from ledger.restore import FINISHED, STARTED, pending
from ledger.states import Event, State
from rails.models import Page, Payout, Refund, Settlement

logger = logging.getLogger(__name__)

DEFAULT_MARGIN_MS = 300_000  # the rail's clock against ours, and its created_at in whole seconds
# Interlock's default call deadline and reconcile delay: what a caller that names no deployment waits for.
DEFAULT_DEADLINE_S = Settings.model_fields["rail_timeout_ms"].default / 1000
DEFAULT_MIN_DELAY_S = Settings.model_fields["reconcile_min_delay_ms"].default / 1000
PAGE = 100
IN_MOTION = (State.AUTHORIZED, State.IN_FLIGHT, State.RECONCILING)
# A known intent the lost tail may have moved on to a send: settled by the rail's entity.
MOVED_ON = frozenset({State.HELD, State.CONFIRMED_NOT_APPLIED, State.FAILED_TERMINAL})
ALL_TOOLS = (REFUND_TOOL, SETTLEMENT_TOOL, PAYOUT_TOOL)
# What the rail may list up to one more delay late (ADR 0026): read a third time.
LISTED_LATE = (REFUND_TOOL, PAYOUT_TOOL)


class RestoreRefused(InterlockError):
    """The restore cannot finish safely; the ledger stays refused to the rail worker and the message says why."""


class RailLists(Protocol):
    def list_refunds(self, *, count: int = ..., skip: int = ...) -> Page[Refund]: ...

    def list_instant_settlements(self, *, count: int = ..., skip: int = ...) -> Page[Settlement]: ...

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = ..., skip: int = ...) -> Page[Payout]: ...  # fmt: skip


@dataclass
class Report:
    last_seq: int
    last_commit_ms: int
    window_from_ms: int
    made_unknown: int = 0
    entities_read: int = 0
    final_read_after_ms: int = 0  # from the restore's start to the start of its last read of the rail (refunds')
    recovered: list[dict[str, Any]] = field(default_factory=list)
    settled: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"last_seq": self.last_seq, "last_commit_ms": self.last_commit_ms, "window_from_ms": self.window_from_ms,
                "made_unknown": self.made_unknown, "entities_read": self.entities_read,
                "final_read_after_ms": self.final_read_after_ms,
                "recovered": self.recovered, "settled": self.settled, "quarantined": self.quarantined}  # fmt: skip


def run(conn: sqlite3.Connection, rail: RailLists, mandates: Sequence[Mandate], *, now: Callable[[], int],
        actor: str, deadline_s: float = DEFAULT_DEADLINE_S, reread_after_s: float = DEFAULT_MIN_DELAY_S,
        sleep: Callable[[float], None] = clock.sleep, monotonic: Callable[[], float] = clock.monotonic,
        payouts: bool = True) -> Report:  # fmt: skip
    """Steps 3-5 on a ledger `begin` marked restored: returns what it did. Safe to run again after a failure (each
    step is idempotent). A ledger with no unfinished restore is refused: marking a live primary, or an empty file,
    as restored would serve it without its history.

    Call it only once the old machine is fenced: it can send nothing from now on. *deadline_s* is the deployment's
    call deadline (INTERLOCK_RAIL_TIMEOUT_MS) and *reread_after_s* its reconcile delay (INTERLOCK_RECONCILE_MIN_
    DELAY_MS). The rail is read at once and again no earlier than now + *deadline_s* + *reread_after_s* on
    *monotonic* (and at least *reread_after_s* after the first read): a call the lost machine sent just before the
    fence is applied within its deadline and listed within the delay after, so that read lists it, and the agent's
    repeat lands on it instead of paying again (ADR 0029, amended; ADR 0010's bound). Refunds and payouts, which the
    rail may list up to one more delay late (ADR 0026), are read a third time, finally, *reread_after_s* after that.
    *payouts* False: the deployment's rail makes no payouts (an upstream MCP server, ADR 0028), so none is read — its
    payout lists are refused, and a restore that asked for them would never finish."""
    fenced_at = monotonic()
    started = pending(conn)
    if started is None:
        raise RestoreRefused("this ledger carries no unfinished restore (RESTORE_STARTED): a ledger is marked restored "
                             "only by `interlock shards restore --replica`, which restores it first")  # fmt: skip
    bad = audit.verify_chain(conn)
    if bad is not None:
        raise AuditChainBroken(bad)
    report = Report(int(started["last_seq"]), int(started["last_commit_ms"]), int(started["window_from_ms"]))
    report.made_unknown = _unsettle(conn, now, actor)
    owners = _owners(mandates)
    final_read_at = fenced_at + deadline_s + reread_after_s
    for reading in range(3):
        if reading == 1:
            # Whatever the first read took, the final one waits out the lost machine's last call (a pause here only
            # makes it later, which is safe).
            sleep(max(reread_after_s, final_read_at - monotonic()))
        elif reading == 2:
            # Refunds and payouts may be listed up to one more delay late (ADR 0026). One the last read missed has no
            # keyed retry to prove it: a refund's repeat is refused by G2 against a payment already refunded (finding
            # F-loss-2), and a payout's repeat to the payee's other fund account carries another key, which G2 lands
            # on the first payout only if the ledger knows it (finding F-loss-4). Both are read once more, a delay
            # later.
            sleep(max(reread_after_s, final_read_at + reread_after_s - monotonic()))
        if reading:
            report.final_read_after_ms = round((monotonic() - fenced_at) * 1000)
        tools: tuple[str, ...] = LISTED_LATE if reading == 2 else ALL_TOOLS
        if not payouts:
            tools = tuple(t for t in tools if t != PAYOUT_TOOL)
        for tool, entity in _stamped_since(rail, mandates, report.window_from_ms // 1000, tools):
            report.entities_read += 1
            _judge(conn, tool, entity, owners, report, now, actor)
    with transaction(conn):
        audit.append(conn, FINISHED, {**report.summary(), "actor": actor}, now())
    logger.warning("restore finished: %d intents in motion made UNKNOWN, %d stamped entities recovered from the rail, "
                   "%d settled, %d quarantined", report.made_unknown, len(report.recovered), len(report.settled),
                   len(report.quarantined))  # fmt: skip
    return report


def begin(conn: sqlite3.Connection, *, now: Callable[[], int], actor: str,
          margin_ms: int = DEFAULT_MARGIN_MS) -> dict[str, Any]:  # fmt: skip
    """Steps 1-2: verify the chain and mark the ledger restored (RESTORE_STARTED), or return the mark already there.
    From the mark on, no rail worker takes this ledger's lease until `run` has finished."""
    bad = audit.verify_chain(conn)
    if bad is not None:
        raise AuditChainBroken(bad)
    started = pending(conn)
    if started is not None:
        return started
    last_seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_head").fetchone()[0])
    last_commit = int(conn.execute(
        "SELECT MAX(t) FROM (SELECT MAX(updated_at) AS t FROM intents UNION ALL SELECT MAX(ts) FROM audit_log)"
    ).fetchone()[0] or 0)  # fmt: skip
    started = {"last_seq": last_seq, "last_commit_ms": last_commit, "window_from_ms": max(0, last_commit - margin_ms),
               "actor": actor}  # fmt: skip
    with transaction(conn):
        audit.append(conn, STARTED, started, now())
        # The lost tail may hold a console logout the replica lacks: a session it shows open may have been revoked.
        console_sessions.revoke_all(conn, now())
    return started


def _unsettle(conn: sqlite3.Connection, now: Callable[[], int], actor: str) -> int:
    marks = ", ".join("?" for _ in IN_MOTION)
    rows = conn.execute(f"SELECT merchant_id, sik FROM intents WHERE state IN ({marks}) ORDER BY merchant_id, sik",
                        [s.value for s in IN_MOTION]).fetchall()  # fmt: skip
    for merchant_id, sik in rows:
        with transaction(conn):
            intents.transition(conn, merchant_id, sik, Event.RESTORED_UNSETTLED, now=now(), actor=actor,
                               detail={"reason": "restored from a replica that may lag the lost primary"},
                               set_fields={"lease_owner": None, "lease_expires_at": None})  # fmt: skip
    return len(rows)


@dataclass(frozen=True)
class _Owner:
    merchant_id: str
    agent_id: str
    mandate: Mandate


ANYONE = "*"  # in _owners: every mandate of the shard, whatever it grants


def _owners(mandates: Sequence[Mandate]) -> dict[str, list[_Owner]]:
    """Who a recovered entity of each tool may belong to: an entity naming its owner, any mandate of the shard
    (ANYONE); one that names none, the mandates granting the tool."""
    owners: dict[str, list[_Owner]] = {ANYONE: [_Owner(m.merchant_id, m.agent_id, m) for m in mandates]}
    for mandate in mandates:
        for tool in (REFUND_TOOL, SETTLEMENT_TOOL, PAYOUT_TOOL):
            if mandate.grant(tool) is not None:
                owners.setdefault(tool, []).append(_Owner(mandate.merchant_id, mandate.agent_id, mandate))
    return owners


def _stamped_since(rail: RailLists, mandates: Sequence[Mandate], since_s: int,
                   tools: Sequence[str] = ALL_TOOLS) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """Every entity of *tools* on the rail created at or after *since_s* (lists newest first, each paged past it to
    the end)."""
    if REFUND_TOOL in tools:
        yield from ((REFUND_TOOL, e) for e in _newest(lambda skip: rail.list_refunds(count=PAGE, skip=skip), since_s))
    if SETTLEMENT_TOOL in tools:
        yield from ((SETTLEMENT_TOOL, e) for e in _newest(
            lambda skip: rail.list_instant_settlements(count=PAGE, skip=skip), since_s))  # fmt: skip
    if PAYOUT_TOOL not in tools:
        return
    # Every account a mandate names, granting payouts or not: one replaced since the tail paid from it still names it.
    accounts = sorted({m.rail.account_number for m in mandates if m.rail.account_number})
    for account in accounts:
        yield from ((PAYOUT_TOOL, e) for e in _newest(
            lambda skip, a=account: rail.list_payouts(a, count=PAGE, skip=skip), since_s))  # type: ignore[misc]


def _newest(page: Callable[[int], Page[Any]], since_s: int) -> Iterator[dict[str, Any]]:
    skip = 0
    while True:
        got = page(skip)
        for item in got.items:
            created = item.created_at
            if created is not None and created < since_s:
                return
            yield dict(item.raw)
        if got.exhausted:
            return
        skip += len(got.items)


def _judge(conn: sqlite3.Connection, tool: str, entity: Mapping[str, Any], owners: Mapping[str, list[_Owner]],
           report: Report, now: Callable[[], int], actor: str) -> None:  # fmt: skip
    siks = stamped_siks(dict(entity))
    if not siks:
        return  # not ours: made by someone else on the account
    sik = siks[0]
    known = conn.execute("SELECT merchant_id FROM intents WHERE sik = ?", (sik,)).fetchall()
    entity_id = str(entity.get("id"))
    if not known:
        _recover(conn, tool, sik, entity, owners, report, now, actor)
        return
    for (merchant_id,) in known:
        intent = intents.require_intent(conn, merchant_id, sik)
        if intent.state not in MOVED_ON:
            continue  # APPLIED already, or UNKNOWN and the reconciler's
        mismatch = terms_mismatch(tool, intent.terms(), entity, full_balance=intent.params.get("full") is True)
        found = {"merchant_id": merchant_id, "sik": sik, "rail_entity_id": entity_id, "was": intent.state.value}
        with transaction(conn):
            if mismatch is None:
                intents.transition(conn, merchant_id, sik, Event.RECOVERED_FROM_RAIL, now=now(), actor=actor,
                                   detail={"rail_entity_id": entity_id}, set_fields={"rail_entity_id": entity_id,
                                                                                       "reason_code": None})
                report.settled.append(found)
            else:
                event = Event.QUARANTINE if intent.state is State.HELD else Event.TERMS_MISMATCH
                intents.transition(conn, merchant_id, sik, event, now=now(), actor=actor, detail=mismatch,
                                   set_fields={"reason_code": "RAIL_TERMS_MISMATCH"})  # fmt: skip
                report.quarantined.append({**found, **mismatch})


def _owner_of(tool: str, sik: str, entity: Mapping[str, Any], everyone: Mapping[str, list[_Owner]]) -> _Owner:
    """Whose call made an entity the restored ledger lost: the (merchant, agent) its notes name, among this shard's
    mandates (granting the tool now or not: the money moved under the mandate the tail had); for an entity sent before
    owners were stamped, the only mandate granting the tool. Anything else is refused: recording another merchant's
    money as this one's would answer the wrong agent."""
    entity_id = str(entity.get("id"))
    named = stamped_owner(dict(entity))
    owners = everyone.get(tool, [])
    if named is not None:
        mine = [o for o in everyone.get(ANYONE, []) if (o.merchant_id, o.agent_id) == named]
        if len(mine) == 1:
            return mine[0]
        raise RestoreRefused(
            f"the rail's {tool} {entity_id} carries Interlock's stamp {sik}, which the restored ledger does not know, "
            f"and names merchant {named[0]} and agent {named[1]}, whom no mandate of this shard serves: configure "
            "that mandate (INTERLOCK_MANDATE) and run `interlock shards restore --resume`; the rail worker stays "
            "refused until then")  # fmt: skip
    if len(owners) == 1:
        return owners[0]
    raise RestoreRefused(
        f"the rail's {tool} {entity_id} carries Interlock's stamp {sik}, which the restored ledger does not know, was "
        f"sent before entities named their merchant, and {len(owners)} mandates of this shard grant {tool}: it cannot "
        "be told whose it is, and the rail worker stays refused. Recording it by hand is not built (ADR 0029): running "
        "`interlock shards restore --resume` with only one agent's mandate configured records every unknown entity "
        "as that agent's")  # fmt: skip


def _recover(conn: sqlite3.Connection, tool: str, sik: str, entity: Mapping[str, Any],
             owners: Mapping[str, list[_Owner]], report: Report, now: Callable[[], int],
             actor: str) -> None:  # fmt: skip
    """Record a stamped entity the ledger never knew as its intent, APPLIED on the entity's terms."""
    entity_id = str(entity.get("id"))
    owner = _owner_of(tool, sik, entity, owners)
    terms = entity_terms(tool, entity)
    amount, subject, currency = terms["amount_minor"], terms["subject"], terms["currency"]
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0 or not subject or not currency:
        raise RestoreRefused(f"the rail's {tool} {entity_id} (stamp {sik}) states no usable terms: {terms}")
    params: dict[str, Any] = {"amount": amount, "notes": dict(entity.get("notes") or {}), "recovered": entity_id}
    if tool == SETTLEMENT_TOOL and entity.get("settle_full_balance") is True:
        params["full"] = True  # a full-balance repeat is that settlement, whatever the balance is now
    with transaction(conn):
        at = now()
        intents.insert_intent(
            conn, merchant_id=owner.merchant_id, sik=sik, tool=tool, subject_id=str(subject), amount_minor=amount,
            currency=str(currency), params=params, params_hash=sha256_hex(canonical_json(params)),
            agent_id=owner.agent_id, mandate_id=owner.mandate.mandate_id, mandate_hash=owner.mandate.mandate_hash,
            operation_ref=None, distinct_reason=None, now=at,
        )  # fmt: skip
        intents.transition(conn, owner.merchant_id, sik, Event.RECOVERED_FROM_RAIL, now=at, actor=actor,
                           detail={"rail_entity_id": entity_id, "created_at": entity.get("created_at")},
                           set_fields={"rail_entity_id": entity_id})  # fmt: skip
    report.recovered.append({"merchant_id": owner.merchant_id, "sik": sik, "tool": tool, "rail_entity_id": entity_id,
                             "amount_minor": amount, "subject": subject})  # fmt: skip

