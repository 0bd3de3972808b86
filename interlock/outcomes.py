"""How the rail worker hands an Outcome to the ingress that is waiting for it: a Redis list per
request id (LPUSH + EXPIRE by the rail worker, BLPOP by the ingress). A lost outcome costs only an
IN_PROGRESS answer; the agent's retry of the same call is answered from the ledger (same SIK).
"""

from __future__ import annotations

import redis

from interlock import clock
from interlock.messages import Outcome
from interlock.queues import OUTCOME_TTL_S, outcome_key


def publish(client: redis.Redis, outcome: Outcome) -> None:
    if outcome.request_id is None:
        return
    key = outcome_key(outcome.request_id)
    # One round trip, no MULTI/EXEC: the list exists before its expiry is set, and a crash between the two leaves
    # at most one list that the ingress's BLPOP (or nobody) takes; the ledger holds the outcome either way.
    pipe = client.pipeline(transaction=False)
    pipe.lpush(key, outcome.to_json())
    pipe.expire(key, OUTCOME_TTL_S)
    pipe.execute()


def wait(client: redis.Redis, request_id: str, timeout_ms: int) -> Outcome | None:
    """The first outcome recorded for *request_id*, or None when the deadline passes.

    Blocks in slices of at most a second, so a client's socket timeout never has to outlast the
    whole deadline."""
    deadline = clock.monotonic() + timeout_ms / 1000
    while True:
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return None
        item = client.blpop([outcome_key(request_id)], timeout=max(min(remaining, 1.0), 0.01))
        if item is not None:
            return Outcome.from_json(item[1])  # type: ignore[no-any-return]
