"""Every Redis key and queue name, in one place, under one `interlock:` namespace.

Every queue name and per-shard key carries the shard id (SPEC §15). Each shard has its own Redis (the map
refuses two shards on one), and the names differ anyway, so that a process pointed at the wrong Redis finds
an empty queue rather than another shard's work: a gate worker of shard s1 never takes a proposal routed to
s0. The default shard ("0", a deployment without a map) keeps the historical bare names. Which shard a
merchant's calls go to is the shard map's (interlock/shards.py).
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "interlock"
DEFAULT_SHARD = "0"


def gates_queue(shard: str = DEFAULT_SHARD) -> str:
    return "gates" if shard == DEFAULT_SHARD else f"gates:{shard}"


def shard_queues(shard: str = DEFAULT_SHARD) -> tuple[str, ...]:
    """Every RQ queue a shard's actors consume: what `interlock shards apply` reads before a merchant moves."""
    return (gates_queue(shard), rail_queue(shard))


def rail_queue(shard: str = DEFAULT_SHARD) -> str:
    return "rail" if shard == DEFAULT_SHARD else f"rail:{shard}"


def reconcile_queue(shard: str = DEFAULT_SHARD) -> str:
    return "reconcile" if shard == DEFAULT_SHARD else f"reconcile:{shard}"


def reconcile_hint_key(shard: str = DEFAULT_SHARD) -> str:
    """A Redis list of intent keys the reconciler should look at soon. Only a hint: its ledger sweep
    finds every UNKNOWN intent even when a hint is lost."""
    return f"{NAMESPACE}:hints:{reconcile_queue(shard)}"


def rail_unrecorded_key(shard: str = DEFAULT_SHARD) -> str:
    """A Redis hash of the rail answers a shard's rail worker holds but could not yet write to its ledger (field
    "merchant_id|sik|attempt_seq", value a JSON summary). Non-empty means that worker sends nothing (ADR 0005);
    `interlock status` and the metrics show it. Only a mirror of what the worker logs at CRITICAL."""
    return f"{NAMESPACE}:rail:unrecorded:{shard}"


def outcome_key(request_id: str) -> str:
    """A Redis list the rail worker pushes the first recorded Outcome of a request onto."""
    return f"{NAMESPACE}:outcome:{request_id}"


def trace_key() -> str:
    """A Redis list of finished per-hop traces (JSON, newest first), pushed by the ingress only while
    INTERLOCK_TRACE is set (ingress.money). The performance bench reads it; nothing decides from it."""
    return f"{NAMESPACE}:traces"


OUTCOME_TTL_S = 3600
TRACE_MAX_LEN = 100_000  # a forgotten INTERLOCK_TRACE=1 keeps only the newest traces, never grows Redis for ever
# Set (to anything but "" or "0") only for the performance bench: keep each call's per-hop trace (ingress.money).
# Named here, beside the list it fills, because the bench that sets it and the ingress that reads it share it.
TRACE_ENV = "INTERLOCK_TRACE"


# RQ job entry points, named by import path so no actor imports another actor's code.
GATE_JOB = "gate_workers.jobs.evaluate_proposal"
ADMIT_JOB = "rail_worker.jobs.handle_decision"
EXECUTE_JOB = "rail_worker.jobs.execute_intent"
RECONCILE_JOB = "reconciler.jobs.reconcile_intent"


def rq_queue(name: str, connection: Any) -> Any:
    """An RQ queue that serialises job arguments as JSON (never pickle: messages are data)."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    return Queue(name, connection=connection, serializer=JSONSerializer, default_timeout=300)
