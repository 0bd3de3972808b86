"""ledger/db.py refuses a ledger that cannot give the durability I2 depends on (issue 17, item 7): each test
fails when the guard it names is deleted."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from interlock.errors import LedgerError
from ledger import db


def test_a_ledger_that_cannot_be_in_wal_mode_is_refused() -> None:
    # An in-memory database answers `PRAGMA journal_mode = WAL` with "memory": no WAL, so no ledger.
    with pytest.raises(LedgerError, match="WAL is required"):
        db.open_ledger(":memory:")


class _NoFullSync(sqlite3.Connection):
    """A connection on which `synchronous = FULL` does not take (as on a build or VFS that caps it)."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.replace(" ", "").upper() == "PRAGMASYNCHRONOUS=FULL":
            sql = "PRAGMA synchronous = NORMAL"
        return super().execute(sql, *args)


def test_a_ledger_whose_commits_would_not_be_fsynced_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="FULL"):
        db.open_ledger(tmp_path / "ledger.sqlite3", factory=_NoFullSync)

