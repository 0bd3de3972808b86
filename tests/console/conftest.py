"""The console as its own process over a real stack (redis-server, sandbox rail, gate worker, rail worker,
reconciler), started through deploy.stack like every other actor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from console.app import create_app
from interlock.config import load_settings
from ledger.db import open_ledger
from ops.context import OpsContext
from tests.engine.conftest import Engine, engine_factory  # noqa: F401  (re-exported fixture)
from tests.mandates import EXAMPLE
from tests.ops.conftest import APPROVER, APPROVER_TOKEN, OTHER, OTHER_TOKEN, write_approvers  # noqa: F401

TOKEN = "console-test-token-0123456789abcdef"  # the console's own: looks, decides nothing
HELD_AMOUNT = 350_000


@dataclass
class Console:
    engine: Engine
    url: str

    def held(self) -> tuple[str, str]:
        pid = self.engine.payment(500_000)
        outcome = self.engine.outcome(self.engine.propose({"payment_id": pid, "amount": HELD_AMOUNT}))
        assert outcome.state == "HELD" and outcome.sik is not None, outcome
        return pid, outcome.sik


@pytest.fixture
def console(engine_factory: Callable[..., Engine]) -> Console:  # noqa: F811
    engine = engine_factory()
    approvers = write_approvers(engine.stack.data_dir / "approvers.yaml")
    return Console(engine, engine.stack.start_console(token=TOKEN, approvers=approvers))


@pytest.fixture
def ledger_ops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> OpsContext:
    """A real ledger file with the example mandate and both approvers' credentials, and no stack: for what the
    console decides before any rail or queue is involved (sessions, who may decide)."""
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()
    approvers = write_approvers(tmp_path / "approvers.yaml")
    for name in ("INTERLOCK_SHARDS", "REDIS_URL", "INTERLOCK_REDIS_URL", "INTERLOCK_MANDATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return OpsContext.from_settings(load_settings(ledger=ledger, mandate=EXAMPLE, approvers=approvers,
                                                  redis_url=None))  # fmt: skip


def in_process(ops: OpsContext) -> TestClient:
    """A console app over *ops*, driven in this process; two of them share nothing but the ledger."""
    return TestClient(create_app(ops, TOKEN), base_url="http://127.0.0.1", follow_redirects=False)
