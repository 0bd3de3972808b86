"""Operator actions against a real stack: redis-server, the sandbox rail, a gate worker, the rail worker
and the reconciler as processes; the operator's functions run in the test process, as the CLI would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from interlock.config import load_settings
from ops.context import OpsContext
from tests.engine.conftest import Engine, engine_factory  # noqa: F401  (re-exported fixture)

APPROVER = "ops_lead@example.com"  # the one approver deploy/mandate.example.yaml names
HELD_AMOUNT = 350_000  # above the example mandate's hold_above_minor (300000): held for a person


@dataclass
class Operated:
    engine: Engine
    ops: OpsContext

    def held(self, amount: int = HELD_AMOUNT, payment_amount: int = 500_000) -> tuple[str, str]:
        """A refund the gates held for approval; returns (payment_id, sik)."""
        pid = self.engine.payment(payment_amount)
        outcome = self.engine.outcome(self.engine.propose({"payment_id": pid, "amount": amount}))
        assert (outcome.state, outcome.caller_action) == ("HELD", "WAIT_FOR_APPROVAL"), outcome
        assert outcome.sik is not None
        return pid, outcome.sik

    def refunds_of(self, payment_id: str) -> list[dict]:
        return [e for e in self.engine.rail.entities("refund") if e["entity"]["payment_id"] == payment_id]


def ops_context_for(engine: Engine, monkeypatch: pytest.MonkeyPatch, **env: str) -> OpsContext:
    """The operator's configuration is the stack's: same ledger, Redis, mandate and rail."""
    stack_env = engine.stack.base_env()
    for name in ("INTERLOCK_LEDGER", "REDIS_URL", "INTERLOCK_MANDATE", "INTERLOCK_RAIL_URL", "INTERLOCK_RAIL_KEY_ID",
                 "INTERLOCK_RAIL_KEY_SECRET"):  # fmt: skip
        monkeypatch.setenv(name, stack_env[name])
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return OpsContext.from_settings(load_settings())


@pytest.fixture
def operated(engine_factory: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch) -> Iterator[Operated]:  # noqa: F811
    engine = engine_factory()
    yield Operated(engine, ops_context_for(engine, monkeypatch))
