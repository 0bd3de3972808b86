"""What a shard's Redis still holds for a merchant: the proposals, Decisions and executions queued, taken by a
worker or scheduled (SPEC §15). `interlock shards apply` refuses to move a merchant while any is there — the
ledger fence (ledger.ownership) would refuse them safely after the move, but the agent would be told to repeat
a call that is still on its way to being answered.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from interlock.queues import gates_queue, reconcile_hint_key, rq_queue, shard_queues
from interlock.shards import Shard

UNREADABLE = "?"  # a job whose merchant cannot be read: it may be a moving merchant's, so it blocks every move


class RedisUnreadable(Exception):
    """Raised when a shard's Redis cannot be read, so nothing can be said about what it holds."""


def queued(shard: Shard) -> dict[str, list[str]]:
    """merchant -> what *shard*'s Redis holds for it ("gates:s0 queued", "rail:s0 started", ...); a job whose
    merchant cannot be read is listed under UNREADABLE."""
    client = redis.Redis.from_url(shard.redis_url, socket_connect_timeout=3, socket_timeout=10)
    try:
        found: dict[str, list[str]] = {}
        # The bare "gates" name too: proposals left there by an ingress from before names carried the shard.
        for name in dict.fromkeys((*shard_queues(shard.name), gates_queue())):
            for where, job_ids in _job_ids(rq_queue(name, client), client):
                for merchant in _merchants_of(client, name, job_ids):
                    found.setdefault(merchant, []).append(f"{name} {where}")
        for hint in client.lrange(reconcile_hint_key(shard.name), 0, -1):  # type: ignore[union-attr]
            text = hint.decode("utf-8", "replace") if isinstance(hint, bytes) else str(hint)
            merchant = text.split("|", 1)[0]
            found.setdefault(merchant, []).append("reconcile hint")
        return {m: sorted(set(places)) for m, places in found.items()}
    except redis.RedisError as exc:
        raise RedisUnreadable(f"shard {shard.name}'s Redis ({shard.redis_url}) cannot be read: {exc}") from exc
    finally:
        client.close()


def _job_ids(queue: Any, client: redis.Redis) -> list[tuple[str, list[str]]]:
    taken = [j.decode() for j in client.lrange(queue.intermediate_queue_key, 0, -1)]  # type: ignore[union-attr]
    return [
        ("queued", list(queue.get_job_ids())),
        ("taken by a worker", taken),
        ("started", list(queue.started_job_registry.get_job_ids())),
        ("scheduled", list(queue.scheduled_job_registry.get_job_ids())),
        ("deferred", list(queue.deferred_job_registry.get_job_ids())),
    ]


def _merchants_of(client: redis.Redis, queue_name: str, job_ids: list[str]) -> list[str]:
    from rq.job import Job
    from rq.serializers import JSONSerializer

    out = []
    for job in Job.fetch_many(job_ids, connection=client, serializer=JSONSerializer):
        if job is None:
            continue  # expired between the listing and the fetch: nothing left to run
        try:
            args = job.args
        except Exception:  # noqa: BLE001 - an unreadable job is reported, not skipped: it may be this merchant's
            out.append(UNREADABLE)
            continue
        merchant = merchant_of_job(args)
        out.append(merchant if merchant is not None else UNREADABLE)
    return out


def merchant_of_job(args: Any) -> str | None:
    """A proposal or Decision travels as JSON with merchant_id; an execution as (merchant_id, sik, request_id)."""
    if not args or not isinstance(args[0], str):
        return None
    first = args[0]
    if first.startswith("{"):
        try:
            body = json.loads(first)
        except ValueError:
            return None
        merchant = body.get("merchant_id") if isinstance(body, dict) else None
        return merchant if isinstance(merchant, str) else None
    return first
