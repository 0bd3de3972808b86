"""The console as its own process over a real stack (redis-server, sandbox rail, gate worker, rail worker,
reconciler), started through deploy.stack like every other actor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.engine.conftest import Engine, engine_factory  # noqa: F401  (re-exported fixture)
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
