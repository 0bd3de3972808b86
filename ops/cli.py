"""`interlock holds ...`, `interlock quarantine ...` and `interlock metrics` (`interlock audit` is ops/audit_cli.py).

Each command is a thin wrapper over ops/: the console calls the same functions. A refusal is an
OperatorRefused (an InterlockError), which `interlock` prints as one line and exits 2.
"""

from __future__ import annotations

import time

import click

from interlock.clock import now_ms
from ledger.intents import Intent
from ledger.lifecycle import ATTENTIONS
from ops import attention, holds, quarantine
from ops.approvers_cli import authenticate
from ops.context import OpsContext
from ops.format import format_minor


def _hold_line(intent: Intent, now: int) -> str:
    left_s = max(0, ((intent.hold_expires_at or now) - now) // 1000)
    return (f"{intent.sik}  {intent.merchant_id}  {intent.tool}  {intent.subject_id}  "
            f"{format_minor(intent.amount_minor, intent.currency)}  agent={intent.agent_id}  "
            f"mandate={intent.mandate_id}  reason={intent.reason_code}  expires_in={left_s}s  "
            f"terms={holds.terms_digest(intent)}")  # fmt: skip


@click.group("holds")
def holds_group() -> None:
    """Calls waiting for a person: list, approve, reject (expired holds are BLOCKED on every run)."""


def _merchant_context(merchant: str | None) -> OpsContext:
    """The context an action on one intent runs in: with a shard map, its merchant's shard (SPEC §15)."""
    ctx = OpsContext.from_settings()
    if ctx.settings.shards is None:
        return ctx
    if merchant is None:
        raise click.UsageError("INTERLOCK_SHARDS is set: pass --merchant, so the action goes to that merchant's shard")
    return ctx.for_merchant(merchant)


@holds_group.command("list")
def holds_list() -> None:
    found, payees = [], {}
    for ctx in OpsContext.from_settings().shards():  # every shard's holds, with a shard map
        for expired in holds.sweep_expired(ctx):
            click.echo(f"expired: {expired.sik} is now BLOCKED (HOLD_EXPIRED)")
        held = holds.list_holds(ctx)
        found += held
        payees.update(holds.payees_shown(ctx, held))
    now = now_ms()
    for intent in found:
        click.echo(_hold_line(intent, now))
        shown = payees.get(intent.sik)
        if shown is not None:  # a payout: whom it pays, as the rail reported the fund account to G2 (ADR 0034)
            click.echo(f"    payee: {holds.describe_payee(shown['payee'])}  payee_digest={shown['payee_digest']}"
                       + ("  (on no list: approve with --allow-payee DIGEST to add it for later calls)"
                          if shown["reason_code"] == "G2_PAYEE_UNLISTED_HELD" else ""))  # fmt: skip
    click.echo(f"{len(found)} held")


_AS_HELP = ("your approver id: named by the intent's mandate, and proven by your own token "
            "(INTERLOCK_APPROVER_TOKEN, else a prompt)")  # fmt: skip


@holds_group.command("approve")
@click.argument("sik")
@click.option("--as", "approver_id", required=True, help=_AS_HELP)
@click.option("--terms", "digest", required=True, help="the held call's terms digest (from `holds list`): what you "
              "approve; refused if the call or its mandate changed since")
@click.option("--reason", default="approved by operator", show_default=True, help="why (goes into the audit record)")
@click.option("--amount", type=int, help="refuse unless the held call is for exactly this many minor units")
@click.option("--merchant", help="merchant id: when merchants share a ledger, and with INTERLOCK_SHARDS")
@click.option("--allow-payee", "payee_digest", metavar="PAYEE_DIGEST",
              help="a payout's payee_digest (from `holds list`): also add this payee to the payees of the mandate the "
              "call was held under, for the agent's later calls (audited PAYEE_ALLOWED); without it only this call "
              "is paid")  # fmt: skip
def holds_approve(sik: str, approver_id: str, digest: str, reason: str, amount: int | None,
                  merchant: str | None, payee_digest: str | None) -> None:  # fmt: skip
    """Release one held call to the rail worker."""
    ctx = _merchant_context(merchant)
    approver = authenticate(ctx, sik, approver_id)
    released = holds.approve(ctx, sik, approver=approver, terms_digest=digest, reason=reason, merchant_id=merchant,
                             expected=holds.Expected(amount_minor=amount), allow_payee=payee_digest)  # fmt: skip
    click.echo(f"approved: {sik} is {released.intent.state.value}; "
               + ("handed to the rail worker" if released.enqueued
                  else "Redis unreachable: the reconciler's sweep will hand it to the rail worker"))  # fmt: skip
    if payee_digest is not None:
        click.echo(f"payee {released.intent.subject_id} " + (
            f"added to the payees of mandate {released.intent.mandate_id} (audit seq {released.payee_allowed_seq})"
            if released.payee_allowed_seq is not None else "was on the mandate's payees already"))  # fmt: skip


@holds_group.command("reject")
@click.argument("sik")
@click.option("--as", "approver_id", required=True, help=_AS_HELP)
@click.option("--reason", required=True, help="why (goes into the audit record)")
@click.option("--merchant", help="merchant id: when merchants share a ledger, and with INTERLOCK_SHARDS")
def holds_reject(sik: str, approver_id: str, reason: str, merchant: str | None) -> None:
    """Refuse one held call: it becomes BLOCKED and nothing moves."""
    ctx = _merchant_context(merchant)
    intent = holds.reject(ctx, sik, approver=authenticate(ctx, sik, approver_id), reason=reason, merchant_id=merchant)
    click.echo(f"rejected: {sik} is {intent.state.value}")


_AS_TYPED_HELP = ("your approver id, as typed: one the intent's mandate names (anyone else is refused); the audit "
                  "record says it was not authenticated, the console records an authenticated one")  # fmt: skip


@click.group("quarantine")
def quarantine_group() -> None:
    """Intents the reconciler could not settle: list them, resolve one with evidence."""


@quarantine_group.command("list")
def quarantine_list() -> None:
    found = [i for ctx in OpsContext.from_settings().shards() for i in quarantine.list_quarantined(ctx)]
    for i in found:
        click.echo(f"{i.sik}  {i.merchant_id}  {i.tool}  {i.subject_id}  {format_minor(i.amount_minor, i.currency)}  "
                   f"attempts={i.attempt_seq}  passes={i.reconcile_attempts}  reason={i.reason_code}")
    click.echo(f"{len(found)} quarantined")


@quarantine_group.command("resolve")
@click.argument("sik")
@click.option("--applied", "entity_id", metavar="RAIL_ENTITY_ID", help="the rail entity that carries our stamp")
@click.option("--not-applied", is_flag=True, help="the rail has no entity with our stamp (re-checked to the end)")
@click.option("--evidence", help="what you checked and where (required with --not-applied)")
@click.option("--as", "operator_id", required=True, help=_AS_TYPED_HELP)
@click.option("--merchant", help="merchant id: when merchants share a ledger, and with INTERLOCK_SHARDS")
def quarantine_resolve(sik: str, entity_id: str | None, not_applied: bool, evidence: str | None, operator_id: str,
                       merchant: str | None) -> None:  # fmt: skip
    """Settle a quarantined intent after checking the rail yourself."""
    intent = quarantine.resolve(_merchant_context(merchant), sik, operator_id=operator_id, applied_entity_id=entity_id,
                                not_applied=not_applied, evidence=evidence, merchant_id=merchant)  # fmt: skip
    click.echo(f"resolved: {sik} is {intent.state.value}" + (f" ({intent.rail_entity_id})" if entity_id else ""))


@click.group("attention")
def attention_group() -> None:
    """Applied money a person must look at (a refund the bank failed, a settlement reversed): list, acknowledge."""


@attention_group.command("list")
@click.option("--all", "show_all", is_flag=True, help="also those a person has acknowledged")
def attention_list(show_all: bool) -> None:
    contexts = OpsContext.from_settings().shards()
    found = [r for ctx in contexts for r in attention.waiting(ctx)]
    for r in found:
        click.echo(f"{r.sik}  {r.merchant_id}  {r.tool}  {r.entity_id}  {r.status}  attention={r.attention}  "
                   f"amounts={r.amounts}  raised={r.raised_seq}")  # fmt: skip
    click.echo(f"{len(found)} waiting for a person")
    if show_all:
        taken = [pair for ctx in contexts for pair in attention.acknowledged(ctx)]
        for r, ack in taken:
            click.echo(f"{r.sik}  {r.merchant_id}  {r.tool}  {r.entity_id}  {r.status}  attention={r.attention}  "
                       f"acknowledged by {ack.operator}: {ack.note}")  # fmt: skip
        click.echo(f"{len(taken)} acknowledged")


@attention_group.command("ack")
@click.argument("sik")
@click.option("--attention", "reason", required=True, type=click.Choice(ATTENTIONS),
              help="the attention you are acknowledging, as listed (a newer one on the same intent is not silenced)")
@click.option("--note", required=True, help="what is being done about it (e.g. the customer contacted, ticket id)")
@click.option("--as", "operator_id", required=True, help=_AS_TYPED_HELP)
@click.option("--merchant", help="merchant id: when merchants share a ledger, and with INTERLOCK_SHARDS")
@click.option("--raised", "raised_seq", type=int, help="the raising you looked at, as listed (raised=N): refused if "
              "the attention has been raised again since (the money at stake changed)")
def attention_ack(sik: str, reason: str, note: str, operator_id: str, merchant: str | None,
                  raised_seq: int | None) -> None:  # fmt: skip
    """Acknowledge one attention as it was raised: a person has it in hand. Nothing else changes; no money moves.
    A later observation that changes the money at stake raises it afresh."""
    row = attention.acknowledge(_merchant_context(merchant), sik, attention=reason, operator_id=operator_id,
                                note=note, merchant_id=merchant, raised_seq=raised_seq)  # fmt: skip
    click.echo(f"acknowledged: {reason} on {sik} ({row.tool} {row.entity_id} {row.status}) by {operator_id}")


@click.command("metrics")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=9464, show_default=True)
def metrics_command(host: str, port: int) -> None:
    """Serve Prometheus metrics (read from the ledger and Redis at scrape time)."""
    from prometheus_client import start_http_server

    from interlock.config import load_settings
    from interlock.redis_conn import connect
    from ops.metrics import build_registry, shard_sources

    settings = load_settings()
    client = connect(settings.redis_url) if settings.redis_url and settings.shards is None else None
    start_http_server(port, addr=host, registry=build_registry(shard_sources(settings, client)))
    click.echo(f"metrics on http://{host}:{port}/metrics", err=True)
    while True:
        time.sleep(3600)
