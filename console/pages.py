"""The console's read-only pages. Each sweeps expired holds first, so a page never shows a stale hold as
approvable.

With a shard map (SPEC §15) the lists gather every shard's intents, each row naming its shard, and a page
about one intent reads the ledger of its merchant's shard only."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from console.render import render
from ledger import audit, lifecycle, operator
from ledger.intents import get_intent
from ledger.states import SETTLED, State
from ops import holds, quarantine
from ops.context import OpsContext

# While an intent is on its way, its page reloads itself (no JavaScript needed to watch it settle).
IN_TRANSIT = frozenset({State.PROPOSED, State.AUTHORIZED, State.IN_FLIGHT, State.UNKNOWN, State.RECONCILING})


def _ctx(request: Request) -> OpsContext:
    ctx: OpsContext = request.app.state.ctx
    return ctx


def _flash(request: Request) -> dict[str, Any]:
    return {"msg": request.query_params.get("msg"), "err": request.query_params.get("err")}


def _render(request: Request, name: str, context: dict[str, Any], status_code: int = 200) -> Response:
    return render(request, name, {**_flash(request), **context}, status_code=status_code)


def _intents(ctx: OpsContext, state: State | None) -> dict[str, Any]:
    rows: list[tuple[str, Any]] = []
    attention: list[tuple[str, lifecycle.RailStatus]] = []  # applied money a person must look at (issue 27)
    counts: dict[str, int] = {}
    for shard in ctx.shards():
        holds.sweep_expired(shard)
        with shard.ledger(readonly=True) as conn:
            for found_state, count in conn.execute("SELECT state, COUNT(*) FROM intents GROUP BY state"):
                counts[found_state] = counts.get(found_state, 0) + int(count)
            rows += [(shard.shard, i) for i in operator.intents_in_state(conn, state)]
            attention += [(shard.shard, r) for r in lifecycle.needs_attention(conn)]
    rows.sort(key=lambda row: row[1].updated_at, reverse=True)
    attention.sort(key=lambda row: row[1].updated_at, reverse=True)
    return {"intents": rows, "counts": counts, "attention": attention}


async def intents_page(request: Request) -> Response:
    raw = request.query_params.get("state") or ""
    state = State(raw) if raw in State.__members__ else None
    data = await run_in_threadpool(_intents, _ctx(request), state)
    return _render(request, "intents.html", {"state": state, "states": list(State), **data})


def _intent(ctx: OpsContext, merchant_id: str, sik: str) -> dict[str, Any] | None:
    ctx = ctx.for_merchant(merchant_id)
    holds.sweep_expired(ctx)
    with ctx.ledger(readonly=True) as conn:
        intent = get_intent(conn, merchant_id, sik)
        if intent is None:
            return None
        rail = lifecycle.current(conn, merchant_id, sik)
        return {"intent": intent, "timeline": operator.timeline(conn, merchant_id, sik),
                "refresh": intent.state in IN_TRANSIT, "settled": intent.state in SETTLED, "shard": ctx.shard,
                "terms_digest": holds.terms_digest(intent), "rail_status": rail,
                "acknowledged": lifecycle.acknowledgement(conn, rail) if rail is not None else None,
                "rail_history": lifecycle.history(conn, merchant_id, sik),
                "approvers": _approvers(ctx, {intent.agent_id})[intent.agent_id]}  # fmt: skip


async def intent_page(request: Request) -> Response:
    merchant_id, sik = request.path_params["merchant_id"], request.path_params["sik"]
    data = await run_in_threadpool(_intent, _ctx(request), merchant_id, sik)
    if data is None:
        return _render(request, "intents.html", {"state": None, "states": list(State), "intents": [], "counts": {},
                                                 "attention": [], "err": f"no intent {sik} for {merchant_id}"},
                       status_code=404)  # fmt: skip
    return _render(request, "intent.html", data)


def _approvers(ctx: OpsContext, agent_ids: set[str]) -> dict[str, list[str]]:
    """Who each agent's mandate names: the only people who may decide its holds, quarantines and attentions
    (ops.approvers.approver_problem decides; this only shows it)."""
    mandates = ctx.mandates()
    return {agent: list(m.approval.approvers) if (m := mandates.get(agent)) else [] for agent in agent_ids}


def _holds(ctx: OpsContext) -> dict[str, Any]:
    held, payees = [], {}
    for shard in ctx.shards():
        found = holds.list_holds(shard)
        held += found
        payees.update(holds.payees_shown(shard, found))  # a payout's payee as the rail reported it (ADR 0034)
    return {"holds": [(i, holds.terms_digest(i)) for i in held], "payees": payees,
            "approvers": _approvers(ctx, {i.agent_id for i in held})}  # fmt: skip


async def holds_page(request: Request) -> Response:
    return _render(request, "holds.html", await run_in_threadpool(_holds, _ctx(request)))


def _quarantined(ctx: OpsContext) -> dict[str, Any]:
    found = [i for shard in ctx.shards() for i in quarantine.list_quarantined(shard)]
    return {"intents": found, "approvers": _approvers(ctx, {i.agent_id for i in found})}


async def quarantine_page(request: Request) -> Response:
    return _render(request, "quarantine.html", await run_in_threadpool(_quarantined, _ctx(request)))


def _audit(ctx: OpsContext) -> dict[str, Any]:
    with ctx.ledger(readonly=True) as conn:
        head = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
        recent = [dict(r) for r in conn.execute(
            "SELECT seq, ts, kind, payload_json, hash FROM audit_log ORDER BY seq DESC LIMIT 50")]  # fmt: skip
        return {"bad_seq": audit.verify_chain(conn), "count": audit.count(conn),
                "head": dict(head) if head else None, "recent": recent}  # fmt: skip


async def audit_page(request: Request) -> Response:
    """One shard's chain at a time (?shard=NAME; the first by default), with a link to each of the others."""
    shards = {shard.shard: shard for shard in _ctx(request).shards()}
    name = request.query_params.get("shard")
    ctx = shards.get(name or "") or next(iter(shards.values()))
    data = await run_in_threadpool(_audit, ctx)
    others = list(shards) if len(shards) > 1 else []
    return _render(request, "audit.html", {**data, "shard": ctx.shard, "shards": others})
