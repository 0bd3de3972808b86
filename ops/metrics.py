"""Prometheus metrics, computed at scrape time from the ledger (read-only) and Redis queue lengths.

The ledger already records every decision, attempt (with start and finish times) and reconcile
finding, so the exporter needs no counters shared across processes: a killed worker loses nothing,
and every actor's work is counted however many processes did it. Served by the console at /metrics
and by `interlock metrics --port P`.

Every series carries a `shard` label (SPEC §15). With a shard map (INTERLOCK_SHARDS) one scrape reads every
shard's ledger and Redis, each on its own: a shard that cannot be read reports interlock_ledger_up 0 for
that shard and the others are unaffected.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from interlock.clock import now_ms
from interlock.config import Settings
from interlock.queues import gates_queue, rail_queue, reconcile_hint_key, rq_queue
from ledger import lifecycle, replication
from ledger.db import open_ledger
from ledger.states import State

logger = logging.getLogger(__name__)

# Seconds; a real rail answers in ~0.2-0.5 s (SPEC §8), a timeout is seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class ShardSource:
    """One shard as the exporter reads it: its ledger (read-only) and its Redis (queue depths; None: skip)."""

    shard: str
    ledger_path: Path
    redis: redis.Redis | None


class LedgerCollector(Collector):
    def __init__(self, sources: list[ShardSource]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        # One family per name, every shard's samples in it: the exposition format allows each name once.
        families: dict[str, Metric] = {}
        for source in self.sources:
            for family in _shard_metrics(source):
                if family.name in families:
                    families[family.name].samples.extend(family.samples)
                else:
                    families[family.name] = family
        yield from families.values()


def _shard_metrics(source: ShardSource) -> Iterator[Metric]:
    up = GaugeMetricFamily("interlock_ledger_up", "1 when the ledger could be read for this scrape", labels=["shard"])
    try:
        conn = open_ledger(source.ledger_path, readonly=True)
    except Exception as exc:  # a scrape reports the failure as a value instead of failing the endpoint
        logger.warning("metrics: cannot open the ledger %s of shard %s: %s", source.ledger_path, source.shard, exc)
        up.add_metric([source.shard], 0)
        yield up
    else:
        try:
            yield from ledger_metrics(conn, shard=source.shard)
            up.add_metric([source.shard], 1)
            yield up
        finally:
            conn.close()
    yield from _queue_depths(source)
    yield from _replication(source)


def _replication(source: ShardSource) -> Iterator[Metric]:
    """The shard's Litestream replica (ADR 0029), when a config lies beside its ledger: transactions captured and not
    yet shipped, and the age of the newest shipped one (grows while nothing is written: read it with the first)."""
    config = source.ledger_path.parent / replication.CONFIG_NAME
    if not config.exists():
        return
    up = GaugeMetricFamily("interlock_replica_up", "1 when the shard's replica position could be read",
                           labels=["shard"])  # fmt: skip
    try:
        found = replication.position(config, source.ledger_path)
    except replication.ReplicationError as exc:
        logger.warning("metrics: cannot read the replica position of shard %s: %s", source.shard, exc)
        up.add_metric([source.shard], 0)
        yield up
        return
    up.add_metric([source.shard], 1)
    yield up
    behind = GaugeMetricFamily("interlock_replica_behind_txids", "ledger transactions Litestream has captured and not "
                               "yet shipped to the replica", labels=["shard"])  # fmt: skip
    behind.add_metric([source.shard], float(found.behind or 0))
    yield behind
    if found.replica_at_ms is not None:
        age = GaugeMetricFamily("interlock_replica_last_shipped_age_seconds", "age of the newest transaction on the "
                                "replica", labels=["shard"])  # fmt: skip
        age.add_metric([source.shard], max(0, now_ms() - found.replica_at_ms) / 1000)
        yield age


def _queue_depths(source: ShardSource) -> Iterator[Metric]:
    if source.redis is None:
        return
    depth = GaugeMetricFamily("interlock_queue_depth", "jobs waiting on each queue", labels=["queue", "shard"])
    names = {"gates": gates_queue(source.shard), "rail": rail_queue(source.shard)}
    try:
        for label, name in names.items():
            depth.add_metric([label, source.shard], rq_queue(name, source.redis).count)
        hints: int = source.redis.llen(reconcile_hint_key(source.shard))  # type: ignore[assignment]  # sync client
        depth.add_metric(["reconcile_hints", source.shard], hints)
    except redis.RedisError as exc:
        logger.warning("metrics: cannot read queue depths of shard %s: %s", source.shard, exc)
        return
    yield depth


def ledger_metrics(conn: sqlite3.Connection, now: int | None = None, *, shard: str = "0") -> Iterator[Metric]:
    now = now if now is not None else now_ms()
    states = GaugeMetricFamily("interlock_intents", "intents by state", labels=["state", "shard"])
    counts = {r[0]: int(r[1]) for r in conn.execute("SELECT state, COUNT(*) FROM intents GROUP BY state")}
    for state in State:
        states.add_metric([state.value, shard], counts.get(state.value, 0))
    yield states

    decisions = CounterMetricFamily("interlock_decisions", "gate decisions by verdict and reason code",
                                    labels=["verdict", "reason_code", "shard"])  # fmt: skip
    for row in conn.execute("SELECT verdict, reason_code, COUNT(*) FROM decisions GROUP BY verdict, reason_code"):
        decisions.add_metric([row[0], row[1], shard], int(row[2]))
    yield decisions

    yield _latency(conn, shard)

    passes = CounterMetricFamily("interlock_reconcile_passes", "reconcile findings by outcome",
                                 labels=["outcome", "shard"])  # fmt: skip
    found = {r[0]: int(r[1]) for r in conn.execute("SELECT outcome, COUNT(*) FROM recon_findings GROUP BY outcome")}
    for outcome in ("APPLIED", "CONFIRMED_NOT_APPLIED", "INCONCLUSIVE"):
        passes.add_metric([outcome, shard], found.get(outcome, 0))
    yield passes

    oldest = GaugeMetricFamily("interlock_oldest_unknown_age_seconds",
                               "age of the oldest unsettled (UNKNOWN/RECONCILING) intent since its attempt started",
                               labels=["shard"])  # fmt: skip
    row = conn.execute(
        """SELECT MIN(COALESCE((SELECT MAX(a.started_at) FROM intent_attempts a
                                WHERE a.merchant_id = i.merchant_id AND a.sik = i.sik), i.updated_at))
           FROM intents i WHERE i.state IN ('UNKNOWN', 'RECONCILING')"""
    ).fetchone()
    oldest.add_metric([shard], 0.0 if row[0] is None else max(0, now - int(row[0])) / 1000)
    yield oldest

    holds = GaugeMetricFamily("interlock_oldest_hold_age_seconds", "age of the oldest call waiting for approval",
                              labels=["shard"])  # fmt: skip
    row = conn.execute("SELECT MIN(updated_at) FROM intents WHERE state = 'HELD'").fetchone()
    holds.add_metric([shard], 0.0 if row[0] is None else max(0, now - int(row[0])) / 1000)
    yield holds

    # The lifecycle after APPLIED (ledger/lifecycle.py): where applied money stands, and what a person must look at
    # (a refund the bank failed, a settlement or payout reversed, a payout failed or not paid): alert on
    # interlock_rail_attention > 0. An attention a person has acknowledged (`interlock attention ack`) moves to
    # interlock_rail_attention_acknowledged.
    followed = GaugeMetricFamily("interlock_rail_status", "applied refunds, settlements and payouts by the rail's "
                                 "latest status", labels=["tool", "status", "shard"])  # fmt: skip
    for tool, status, n in lifecycle.counts(conn):
        followed.add_metric([tool, status, shard], n)
    yield followed
    attention = GaugeMetricFamily("interlock_rail_attention",
                                  "applied money a person must look at and nobody has acknowledged "
                                  f"({', '.join(lifecycle.ATTENTIONS)})",
                                  labels=["reason", "shard"])  # fmt: skip
    taken = GaugeMetricFamily("interlock_rail_attention_acknowledged", "applied money a person must look at and a "
                              "person has acknowledged", labels=["reason", "shard"])  # fmt: skip
    raised = dict(lifecycle.attention_counts(conn))
    acknowledged = dict(lifecycle.attention_counts(conn, acknowledged=True))
    for reason in lifecycle.ATTENTIONS:
        attention.add_metric([reason, shard], raised.get(reason, 0))
        taken.add_metric([reason, shard], acknowledged.get(reason, 0))
    yield attention
    yield taken

    yield from waiting_for_a_person(conn, now, shard)

    records = GaugeMetricFamily("interlock_audit_records", "records in the audit chain", labels=["shard"])
    records.add_metric([shard], int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_head").fetchone()[0]))
    yield records


# What waits for a person (issue 48 item 5), by merchant: a call HELD for an approver, an intent QUARANTINED for a
# person to resolve with evidence, an attention raised on applied money and acknowledged by nobody. The alerting
# rules shipped in deploy/prometheus/interlock-alerts.yml fire on these.
WAITING_KINDS = ("held", "quarantined", "attention")


def waiting_for_a_person(conn: sqlite3.Connection, now: int, shard: str) -> Iterator[Metric]:
    count = GaugeMetricFamily("interlock_waiting_for_a_person", "items waiting for a person: calls held for an "
                              "approver, quarantined intents, unacknowledged attentions", labels=["kind", "merchant",
                                                                                                  "shard"])  # fmt: skip
    oldest = GaugeMetricFamily("interlock_waiting_for_a_person_oldest_age_seconds", "how long the oldest item of each "
                               "kind has waited", labels=["kind", "merchant", "shard"])  # fmt: skip
    found: list[tuple[str, str, int, int]] = [
        ("held" if state == "HELD" else "quarantined", str(merchant), int(n), int(since)) for state, merchant, n, since
        in conn.execute("""SELECT state, merchant_id, COUNT(*), MIN(updated_at) FROM intents
                           WHERE state IN ('HELD', 'QUARANTINED') GROUP BY state, merchant_id""")]  # fmt: skip
    attentions = lifecycle.attentions_waiting_by_merchant(conn)
    found += [("attention", merchant, n, since) for merchant, n, since in attentions]
    for kind, merchant, n, since in found:
        count.add_metric([kind, merchant, shard], n)
        oldest.add_metric([kind, merchant, shard], max(0, now - since) / 1000)
    yield count
    yield oldest


def _latency(conn: sqlite3.Connection, shard: str) -> HistogramMetricFamily:
    hist = HistogramMetricFamily("interlock_rail_call_duration_seconds",
                                 "money calls to the rail, attempt start to recorded outcome",
                                 labels=["tool", "outcome", "shard"])  # fmt: skip
    rows = conn.execute(
        """SELECT i.tool, a.outcome, a.finished_at - a.started_at FROM intent_attempts a
           JOIN intents i ON i.merchant_id = a.merchant_id AND i.sik = a.sik
           WHERE a.finished_at IS NOT NULL ORDER BY 1, 2"""
    )
    series: dict[tuple[str, str], list[float]] = {}
    for tool, outcome, ms in rows:
        series.setdefault((tool, outcome or "UNKNOWN"), []).append(max(0, int(ms)) / 1000)
    for labels, values in series.items():
        buckets = [(str(b), float(sum(1 for v in values if v <= b))) for b in LATENCY_BUCKETS]
        buckets.append(("+Inf", float(len(values))))
        hist.add_metric([*labels, shard], buckets, sum(values))
    return hist


def build_registry(sources: list[ShardSource]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LedgerCollector(sources))
    return registry


def shard_sources(settings: Settings, single_redis: redis.Redis | None) -> list[ShardSource]:
    """Every shard of the map (INTERLOCK_SHARDS), or the one shard of today's settings with *single_redis*.
    A shard's Redis client is made without a PING: a shard that is down must not stop the exporter."""
    if settings.shards is None:
        return [ShardSource(settings.shard, settings.require("ledger"), single_redis)]
    from interlock.shards import load_shard_map

    return [ShardSource(s.name, s.ledger, redis.Redis.from_url(s.redis_url, socket_connect_timeout=1, socket_timeout=2))
            for s in load_shard_map(settings.shards).shards]  # fmt: skip
