"""The reconciler's wait for hints never asks Redis to block for ever.

Redis 6.2 turns a BLPOP timeout in seconds into whole milliseconds by truncation: 0.001 s becomes 0, which blocks
until a hint comes or the client's socket timeout gives up. The loop often asks for a wait of ~0 (a sweep is due
now); before the floor it then stalled for the socket timeout (10 s in production), holding every hinted intent
and every webhook that long (found by `interlock bench perf --webhooks`)."""

from __future__ import annotations

import redis

from deploy.redis_server import EmbeddedRedis
from interlock.queues import reconcile_hint_key
from reconciler.worker import _wait_for_hints


def test_a_wait_of_nothing_returns_instead_of_blocking(redis_server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=5)
    try:
        client.delete(reconcile_hint_key("hintwait"))
        for asked in (0.0, 0.0004, 0.001, -1.0):
            assert _wait_for_hints(client, "hintwait", asked) == 0  # a blocked BLPOP raises TimeoutError instead
        client.rpush(reconcile_hint_key("hintwait"), "a", "b", "c")
        assert _wait_for_hints(client, "hintwait", 0.0) == 3
    finally:
        client.close()
