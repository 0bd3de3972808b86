"""Connecting to Redis with an actionable error: how every actor reaches its queues.

Starting a redis-server is the run story's business (deploy/redis_server.py); this module only
connects to one that is already there, named by REDIS_URL.
"""

from __future__ import annotations

import redis

from interlock.errors import ConfigError, InterlockError


class RedisUnavailable(InterlockError):
    """Raised when Redis cannot be reached; names the URL."""


def connect(url: str | None) -> redis.Redis:
    """A client for *url* (REDIS_URL), checked with a PING so a wrong URL fails here, clearly."""
    if not url:
        raise ConfigError(
            "REDIS_URL is not set; point it at Redis, e.g. redis://127.0.0.1:6379/0", variable="REDIS_URL"
        )
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {exc}") from exc
    return client
