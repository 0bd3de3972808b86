"""What every tool call needs, built once when the ingress starts: settings, mandates, Redis clients,
the rail client (lazily), and who the caller is.

Sharding (SPEC §15): the ingress is the one process that meets every shard. Each money call goes to the
Redis of its merchant's shard (`Ingress.route`), waits for its outcome on that same Redis, and
interlock_status reads that same shard's ledger; nothing reads another shard's. Without INTERLOCK_SHARDS
there is one route, from REDIS_URL and INTERLOCK_LEDGER (one shard, as before).

Identity is trusted configuration only (SPEC §10): on stdio the launch config's INTERLOCK_AGENT_ID;
over HTTP the agent the bearer middleware stamped on the request that carried this message. There is
no default agent: a message without an identity is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ingress.admission import money_slots, other_slots
from interlock.config import Settings
from interlock.errors import ConfigError
from interlock.mandate import Mandate, MandateStore
from interlock.queues import TRACE_ENV, gates_queue, rq_queue
from interlock.shards import ShardMap, load_shard_map
from rails.base import RAIL_MCP_UPSTREAM, Rail, make_rail
from rails.upstream_manifest import ManifestCache, ToolLister

logger = logging.getLogger(__name__)

T = TypeVar("T")

# ASGI scope key under which the HTTP bearer middleware records the authenticated agent.
AGENT_SCOPE_KEY = "interlock.agent_id"
# Blocking work (Redis, SQLite, the rail's REST client) runs in threads. A money call holds one for its enqueue
# and then its wait (up to INTERLOCK_OUTCOME_WAIT_MS): those run on a limiter of INTERLOCK_INGRESS_MAX_MONEY_CALLS
# threads, which admission (ingress.admission) never oversubscribes; reads, interlock_status and the proxy's
# pass-through share a second one of OTHER_BLOCKING_CALLS, so neither kind can hold up the other.
OTHER_BLOCKING_CALLS = 64
QUEUE_SOCKET_TIMEOUT_S = 5.0
# Enqueues are one short round trip each: a small pool serves them, and a burst waits for a free connection
# (up to the socket timeout) rather than failing with "Too many connections".
QUEUE_POOL_SIZE = 32


@dataclass(frozen=True)
class Caller:
    agent_id: str
    mandate: Mandate | None

    @property
    def merchant_id(self) -> str | None:
        # The merchant is the mandate's: trusted configuration, never a tool argument.
        return None if self.mandate is None else self.mandate.merchant_id


@dataclass
class ShardRoute:
    """One shard as the ingress reaches it: its Redis (to enqueue on, and to wait for outcomes on) and
    its ledger (for interlock_status; None when the ingress has no ledger configured)."""

    name: str
    ledger: Path | None
    queue_redis: redis.Redis
    wait_redis: redis.Redis
    _gates: Any = field(default=None, repr=False)

    @classmethod
    def connect(cls, name: str, url: str, ledger: Path | None, settings: Settings) -> ShardRoute:
        # One retry, no backoff: enough to replace a pooled connection Redis dropped on restart, short
        # enough that "Redis is down" is answered at once instead of after a backoff ladder.
        queue_redis = _redis(url, socket_timeout=QUEUE_SOCKET_TIMEOUT_S, pool_size=QUEUE_POOL_SIZE)
        # BLPOP blocks for up to the outcome deadline; the socket timeout must outlast it. One connection per
        # wait the ingress admits (all of them may be for this shard's merchants), so a wait never lacks one.
        wait_redis = _redis(url, socket_timeout=settings.outcome_wait_ms / 1000 + QUEUE_SOCKET_TIMEOUT_S,
                            pool_size=settings.ingress_max_money_calls)  # fmt: skip
        return cls(name, ledger, queue_redis, wait_redis)

    def gates_queue(self) -> Any:
        """The RQ queue proposals go to, built once rather than on every call."""
        if self._gates is None:
            self._gates = rq_queue(gates_queue(self.name), self.queue_redis)
        return self._gates

    def close(self) -> None:
        self.queue_redis.close()
        self.wait_redis.close()


class Ingress:
    def __init__(self, settings: Settings, mandates: MandateStore, *, stdio_agent_id: str | None) -> None:
        self.settings = settings
        self.mandates = mandates
        self.stdio_agent_id = stdio_agent_id
        self.shard_map: ShardMap | None = None
        if settings.shards is not None:
            self.shard_map = load_shard_map(settings.shards)
            self.routes = {s.name: ShardRoute.connect(s.name, s.redis_url, s.ledger, settings)
                           for s in self.shard_map.shards}  # fmt: skip
        else:
            url = settings.require("redis_url")
            self.routes = {settings.shard: ShardRoute.connect(settings.shard, url, settings.ledger, settings)}
        self._rail: Rail | None = None
        # Proxy mode (INTERLOCK_RAIL=mcp-upstream): list and pass through the upstream's tools (ingress.proxy).
        self.proxy = settings.rail == RAIL_MCP_UPSTREAM
        self._manifest: ManifestCache | None = None
        self.money_slots = money_slots(settings.agent_max_money_calls, settings.ingress_max_money_calls)
        self.other_slots = other_slots(settings.agent_max_other_calls)
        self._limiters: dict[bool, anyio.CapacityLimiter] = {}
        # Benchmarking only: finished call traces are kept by a thread of their own, off the answer's path.
        tracing = os.environ.get(TRACE_ENV, "") not in ("", "0")
        self.tracer = ThreadPoolExecutor(1, thread_name_prefix="trace") if tracing else None

    def route(self, merchant_id: str) -> ShardRoute:
        """The shard holding *merchant_id*'s intents: where its calls are enqueued, waited on and looked up."""
        if self.shard_map is None:
            return self.routes[self.settings.shard]
        return self.routes[self.shard_map.shard_of(merchant_id)]

    def check_redis(self) -> None:
        """Log (do not fail) when a shard's Redis is down at start: its calls then answer a retryable error."""
        for route in self.routes.values():
            try:
                route.queue_redis.ping()
            except redis.RedisError as exc:
                logger.warning("Redis of shard %s is not reachable yet (%s); its money calls will answer "
                               "RETRY_SAME_CALL until it is", route.name, exc)  # fmt: skip

    def caller(self, request: Any) -> Caller | None:
        """The trusted identity of the message carried by *request* (None on stdio)."""
        if self.stdio_agent_id is not None:
            agent_id: str | None = self.stdio_agent_id
        else:
            scope = getattr(request, "scope", None)
            agent_id = scope.get(AGENT_SCOPE_KEY) if isinstance(scope, dict) else None
        if agent_id is None:
            return None
        return Caller(agent_id, self.mandates.get(agent_id))

    def rail(self) -> Rail:
        """The rail client, made on first use so a stack without a rail still serves money calls."""
        if self._rail is None:
            self._rail = make_rail(self.settings)
        return self._rail

    def manifest(self) -> ManifestCache:
        """Proxy mode only: the upstream's tool manifest, fetched through the rail's own session."""
        if self._manifest is None:
            rail = self.rail()
            assert isinstance(rail, ToolLister), "the upstream manifest exists only in proxy mode"
            self._manifest = ManifestCache(rail, ttl_ms=self.settings.upstream_manifest_ttl_ms)
        return self._manifest

    async def blocking(self, fn: Callable[..., T], *args: Any, money: bool = False) -> T:
        """Run *fn* in a worker thread: a money call's enqueue and wait (`money=True`, under a slot of
        self.money_slots) on their own limiter, everything else on the other."""
        limiter = self._limiters.get(money)
        if limiter is None:  # made on first use: a CapacityLimiter belongs to the running event loop
            size = self.settings.ingress_max_money_calls if money else OTHER_BLOCKING_CALLS
            limiter = self._limiters[money] = anyio.CapacityLimiter(size)
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.shutdown(wait=True)
        for route in self.routes.values():
            route.close()
        if self._rail is not None:
            self._rail.close()


def _redis(url: str, *, socket_timeout: float, pool_size: int) -> redis.Redis:
    # A blocking pool: past pool_size a command waits (up to QUEUE_SOCKET_TIMEOUT_S) for a connection to be
    # given back instead of failing at once with "Too many connections" (redis-py's default pool is 100).
    try:
        pool = redis.BlockingConnectionPool.from_url(
            url, max_connections=pool_size, timeout=QUEUE_SOCKET_TIMEOUT_S,
            socket_connect_timeout=2, socket_timeout=socket_timeout, retry=Retry(NoBackoff(), 1),
        )  # fmt: skip
        return redis.Redis.from_pool(pool)
    except ValueError as exc:
        raise ConfigError(f"REDIS_URL={url!r} is not a Redis URL: {exc}", variable="REDIS_URL") from None
