"""`interlock status`: the first thing an operator runs — intents by state, the oldest UNKNOWN,
queue depths, who holds the rail worker's lease, where applied money stands at the rail (and what of it
needs a person: a refund the bank failed, a settlement reversed), and the timing bounds the money path
relies on.

With a shard map (INTERLOCK_SHARDS) it reports each shard on its own and the intents of all of them in
total; a shard whose ledger cannot be read is reported as such, and the others still are."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import click
import redis

from interlock.clock import now_ms
from interlock.config import Settings, env_name, load_settings
from interlock.errors import InterlockError
from interlock.queues import gates_queue, rail_queue, rail_unrecorded_key, reconcile_hint_key, rq_queue
from interlock.shards import load_shard_map
from ledger import leases, lifecycle, replication
from ledger.db import open_ledger
from ledger.queries import intents_by_state


def collect(ledger_path: Path, redis_url: str | None, shard: str) -> dict[str, Any]:
    now = now_ms()
    conn = open_ledger(ledger_path, readonly=True)
    try:
        oldest = conn.execute(
            """SELECT MIN(a.started_at) FROM intents i JOIN intent_attempts a
               ON a.merchant_id = i.merchant_id AND a.sik = i.sik AND a.attempt_seq = i.attempt_seq
               WHERE i.state IN ('UNKNOWN', 'RECONCILING')"""
        ).fetchone()[0]
        lease = leases.get_lease(conn, leases.RAIL_WORKER_LEASE)
        report: dict[str, Any] = {
            "ledger": str(ledger_path),
            "intents_by_state": intents_by_state(conn),
            "oldest_unknown_age_ms": None if oldest is None else now - int(oldest),
            "rail_worker_lease": None if lease is None else {
                "owner": lease.owner, "epoch": lease.epoch, "live": lease.expires_at > now,
                "heartbeat_age_ms": now - lease.heartbeat_at,
            },
            "rail_status": _by_tool(lifecycle.counts(conn)),
            "needs_attention": [
                {"merchant_id": row.merchant_id, "sik": row.sik, "tool": row.tool, "entity_id": row.entity_id,
                 "status": row.status, "attention": row.attention, "amounts": row.amounts,
                 "raised_seq": row.raised_seq, "updated_at": row.updated_at}
                for row in lifecycle.needs_attention(conn)
            ],
            "acknowledged_attention": [
                {"merchant_id": row.merchant_id, "sik": row.sik, "tool": row.tool, "entity_id": row.entity_id,
                 "status": row.status, "attention": row.attention, "acknowledged": ack.view()}
                for row, ack in lifecycle.acknowledged(conn)
            ],
        }  # fmt: skip
    finally:
        conn.close()
    report["queues"] = _queue_depths(redis_url, shard)
    report["unrecorded_rail_answers"] = _unrecorded(redis_url, shard)
    report["replication"] = replication_report(ledger_path, now)
    return report


def replication_report(ledger_path: Path, now: int) -> dict[str, Any] | None:
    """Where the ledger's Litestream replica stands (ADR 0029), when the shard is replicated: a config beside the
    ledger (`interlock up` writes one when INTERLOCK_REPLICA_URL is set). None when it is not."""
    config = ledger_path.parent / replication.CONFIG_NAME
    if not config.exists():
        return None
    try:
        found = replication.position(config, ledger_path)
    except replication.ReplicationError as exc:
        return {"config": str(config), "error": str(exc)}
    return {
        "config": str(config), "replica_txid": found.replica_txid, "local_txid": found.local_txid,
        "behind_txids": found.behind,
        "last_shipped_age_ms": None if found.replica_at_ms is None else max(0, now - found.replica_at_ms),
    }  # fmt: skip


def _by_tool(counts: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    by_tool: dict[str, dict[str, int]] = {}
    for tool, status, n in counts:
        by_tool.setdefault(tool, {})[status] = n
    return by_tool


# What each bound protects. Settlements have no rail-side idempotency key, so the first two are where a
# rail that applies late, or lists late, could still be paid twice (ADR 0010); the operator must see them.
_BOUNDS: tuple[tuple[str, str], ...] = (
    ("rail_timeout_ms", "a money call is given up after this; a settlement the rail applies later than this plus "
                        "the reconcile delay may be paid twice (ADR 0010)"),
    ("reconcile_min_delay_ms", "an absent stamp is believed only this long after the call gave up; a rail whose "
                               "lists lag longer may see a settlement paid twice (ADR 0010)"),
    ("lease_ttl_ms", "a dead rail worker's IN_FLIGHT call counts as abandoned only after this lease plus the "
                     "rail timeout (plus the clock skew)"),
    ("clock_skew_ms", "the most two processes' wall clocks may differ: one process's timestamps are compared with "
                      "another's only with this allowed; clocks further apart can pay twice (ADR 0032)"),
    ("settlement_window_grace_ms", "a settlement repeated this soon after its window's boundary lands on the "
                                   "previous window's intent (ADR 0009)"),
    ("decision_max_age_ms", "a call not admitted this long after it was received moves nothing (DECISION_EXPIRED); "
                            "a settlement's only until the end of the window after its own (ADR 0009)"),
)  # fmt: skip


def timing_bounds(settings: Settings) -> dict[str, dict[str, Any]]:
    """The configured bounds, by environment variable, each with the one line that says what it bounds."""
    return {env_name(name): {"ms": getattr(settings, name), "bounds": text} for name, text in _BOUNDS}


def _queue_depths(redis_url: str | None, shard: str) -> dict[str, Any]:
    if not redis_url:
        return {"error": "REDIS_URL is not set"}
    try:
        client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
        names = (gates_queue(shard), rail_queue(shard))
        depths: dict[str, Any] = {name: rq_queue(name, client).count for name in names}
        depths["reconcile_hints"] = client.llen(reconcile_hint_key(shard))
        return depths
    except redis.RedisError as exc:
        return {"error": f"Redis at {redis_url} unreachable: {exc}"}


def _unrecorded(redis_url: str | None, shard: str) -> list[dict[str, Any]] | None:
    """The rail answers the shard's rail worker holds but could not write (it sends nothing meanwhile: ADR 0005);
    None when Redis cannot be read (the queues line says why)."""
    if not redis_url:
        return None
    try:
        client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
        held = client.hgetall(rail_unrecorded_key(shard))
    except redis.RedisError:
        return None
    out = []
    for field, value in sorted(held.items()):
        name = field.decode() if isinstance(field, bytes) else str(field)
        merchant_id, sik, attempt_seq = name.split("|")
        out.append({"merchant_id": merchant_id, "sik": sik, "attempt_seq": int(attempt_seq),
                    **json.loads(value)})  # fmt: skip
    return out


def collect_shards(shards_file: Path) -> dict[str, Any]:
    """Every shard of the map, each on its own, and the intents of all of them by state in total."""
    shards: dict[str, Any] = {}
    total: dict[str, int] = {}
    for shard in load_shard_map(shards_file).shards:
        try:
            report = collect(shard.ledger, shard.redis_url, shard.name)
        except (InterlockError, OSError, sqlite3.Error) as exc:
            shards[shard.name] = {"ledger": str(shard.ledger), "error": f"cannot read the ledger: {exc}"}
            continue
        shards[shard.name] = report
        for state, count in report["intents_by_state"].items():
            total[state] = total.get(state, 0) + count
    return {"shards": shards, "total": {"intents_by_state": total}}


@click.command("status")
@click.option("--ledger", type=click.Path(path_type=Path), help="ledger file (default: $INTERLOCK_LEDGER)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def status_command(ledger: Path | None, as_json: bool) -> None:
    """Intents by state, oldest UNKNOWN age, queue depths and the rail worker's lease (per shard with a map)."""
    settings = load_settings()
    if ledger is None and settings.shards is not None:
        sharded = collect_shards(settings.shards)
        sharded["timing_bounds"] = timing_bounds(settings)
        if as_json:
            click.echo(json.dumps(sharded, indent=2, sort_keys=True))
            return
        for name, report in sharded["shards"].items():
            click.echo(f"shard {name}")
            if "error" in report:
                click.echo(f"  ledger {report['ledger']}: {report['error']}")
            else:
                _print_shard(report, indent="  ")
        click.echo("total")
        for state, count in sorted(sharded["total"]["intents_by_state"].items()):
            click.echo(f"  {state:<22} {count}")
        _print_bounds(sharded["timing_bounds"])
        return
    report = collect(ledger or settings.require("ledger"), settings.redis_url, settings.shard)
    report["timing_bounds"] = timing_bounds(settings)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
        return
    _print_shard(report)
    _print_bounds(report["timing_bounds"])


def _print_shard(report: dict[str, Any], indent: str = "") -> None:
    click.echo(f"{indent}ledger {report['ledger']}")
    for state, count in sorted(report["intents_by_state"].items()):
        click.echo(f"{indent}  {state:<22} {count}")
    age = report["oldest_unknown_age_ms"]
    click.echo(f"{indent}oldest UNKNOWN/RECONCILING: {'none' if age is None else f'{age / 1000:.1f}s'}")
    lease = report["rail_worker_lease"]
    if lease is None:
        click.echo(f"{indent}rail worker lease: never taken")
    else:
        click.echo(f"{indent}rail worker lease: {lease['owner']} epoch {lease['epoch']} "
                   f"({'live' if lease['live'] else 'EXPIRED'}, heartbeat {lease['heartbeat_age_ms']} ms ago)")
    click.echo(f"{indent}queues: " + ", ".join(f"{k}={v}" for k, v in report["queues"].items()))
    for tool, statuses in sorted(report["rail_status"].items()):
        click.echo(f"{indent}at the rail, {tool}: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    for row in report["needs_attention"]:
        click.echo(f"{indent}NEEDS A PERSON: {row['attention']} {row['tool']} {row['entity_id']} of "
                   f"{row['merchant_id']} {row['sik']} (rail status {row['status']}, {row.get('amounts')}; "
                   f"`interlock attention ack {row['sik']} --attention {row['attention']}"
                   + (f" --raised {row['raised_seq']}" if row.get("raised_seq") is not None else "")
                   + "` once you have it in hand)")
    if report.get("acknowledged_attention"):
        click.echo(f"{indent}attention acknowledged by a person: {len(report['acknowledged_attention'])} "
                   "(`interlock attention list --all`)")
    replica = report.get("replication")
    if replica is not None and "error" in replica:
        click.echo(f"{indent}REPLICATION UNREADABLE: {replica['error']}")
    elif replica is not None:
        shipped = replica["last_shipped_age_ms"]
        click.echo(f"{indent}replication: replica at txid {replica['replica_txid']}, local {replica['local_txid']} "
                   f"({replica['behind_txids']} not shipped yet); last shipped "
                   f"{'never' if shipped is None else f'{shipped / 1000:.1f}s ago'}")
    for held in report.get("unrecorded_rail_answers") or []:
        click.echo(f"{indent}RAIL WORKER NOT SENDING: {held['worker']} holds the unrecorded {held['outcome']} "
                   f"{held.get('rail_entity_id') or ''} of {held['sik']} attempt {held['attempt_seq']} "
                   f"({'past' if held.get('overdue') else 'before'} the instant the reconciler may act, ADR 0005)")


def _print_bounds(bounds: dict[str, Any]) -> None:
    click.echo("timing bounds:")
    for variable, bound in bounds.items():
        click.echo(f"  {variable}={bound['ms']} ms: {bound['bounds']}")
