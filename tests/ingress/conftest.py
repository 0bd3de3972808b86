from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from deploy.redis_server import EmbeddedRedis
from tests.ingress.helpers import DEMO_AGENT, EXAMPLE_MANDATE


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A real redis-server process for one test (no persistence: a restart starts empty)."""
    server = EmbeddedRedis(tmp_path / "redis", appendonly=False).start()
    yield server
    server.stop()


@pytest.fixture
def rclient(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


@pytest.fixture
def env(redis_server: EmbeddedRedis, tmp_path: Path) -> dict[str, str]:
    """What the agent's MCP client would put in the stdio ingress's launch config."""
    return {
        "REDIS_URL": redis_server.url,
        "INTERLOCK_MANDATE": str(EXAMPLE_MANDATE),
        "INTERLOCK_AGENT_ID": DEMO_AGENT,
        "INTERLOCK_OUTCOME_WAIT_MS": "60000",  # a deadline only: an answer comes as soon as its outcome does
        "INTERLOCK_LEDGER": str(tmp_path / "ledger.sqlite3"),
        # The rail, required at start (these tests read nothing from it): the README's config, at a port nothing
        # listens on.
        "INTERLOCK_RAIL_URL": "http://127.0.0.1:9",
        "INTERLOCK_RAIL_KEY_ID": "rzp_test_interlock",
        "INTERLOCK_RAIL_KEY_SECRET": "interlock_sandbox_secret",
    }


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[object]:
    """The stdio ingress's stderr, kept in a file so a failing test can show it."""
    with (tmp_path / "ingress.stderr").open("w") as handle:
        yield handle
