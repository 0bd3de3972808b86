"""Fixtures every in-process reconciler test shares: the send world (real SQLite ledger, fake rail, injectable
clock; tests/engine/send_world.py), a connection to its ledger, and the Redis stand-in of recon_world.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger import webhook_inbox
from ledger.db import open_ledger
from tests.engine.send_world import World, make_world
from tests.reconciler.recon_world import Clock, Hub


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = make_world(tmp_path, monkeypatch)
    yield made
    made.close()


@pytest.fixture
def conn(world: World) -> sqlite3.Connection:
    return open_ledger(world.path)


@pytest.fixture
def inbox(tmp_path: Path) -> sqlite3.Connection:
    """A fresh webhook inbox (ledger/webhook_inbox.py)."""
    return webhook_inbox.open_inbox(tmp_path / "webhooks.sqlite3")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Hub:
    made = Hub()
    made.install(monkeypatch)
    return made
