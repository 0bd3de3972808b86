from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.db import open_ledger


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite3"


@pytest.fixture
def ledger(ledger_path: Path) -> Iterator[sqlite3.Connection]:
    conn = open_ledger(ledger_path)
    yield conn
    conn.close()
