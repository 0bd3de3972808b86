"""A rail worker's admit over a real ledger file, without its processes: for what the gates hand it."""

from __future__ import annotations

from pathlib import Path

import pytest

from interlock.config import Settings
from interlock.mandate import MandateStore
from ledger.db import open_ledger
from rail_worker.lease import boot
from rail_worker.runtime import RailRuntime
from tests.mandates import AGENT, make_mandate


@pytest.fixture
def rail_rt(tmp_path: Path) -> RailRuntime:
    """The rail worker's runtime holding its lease; admit() needs nothing of the rail or Redis."""
    path = tmp_path / "admit.sqlite3"
    rt = RailRuntime(settings=Settings(), ledger_path=path, ledger=open_ledger(path),
                     mandates=MandateStore({AGENT: make_mandate()}), rail=None, redis=None,  # type: ignore[arg-type]
                     owner="rail-test")  # fmt: skip
    boot(rt)
    return rt
