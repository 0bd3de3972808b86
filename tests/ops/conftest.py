"""Operator actions against a real stack: redis-server, the sandbox rail, a gate worker, the rail worker
and the reconciler as processes; the operator's functions run in the test process, as the CLI would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock.config import load_settings
from ops import holds
from ops.approvers import Approver, token_sha256, yaml_entry
from ops.context import OpsContext
from tests.engine.conftest import Engine, engine_factory  # noqa: F401  (re-exported fixture)

APPROVER = "ops_lead@example.com"  # the one approver deploy/mandate.example.yaml names
# Each person's own credential (ADR 0015): the approvers file holds only their sha256.
APPROVER_TOKEN = "ops-lead-token-0123456789abcdefghijklmnopqrstuv"
OTHER = "mallory@example.com"  # has a credential, but no mandate names her
OTHER_TOKEN = "mallory-token-0123456789abcdefghijklmnopqrstuvwx"
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

    def approver(self, token: str = APPROVER_TOKEN) -> Approver:
        """The approver this token proves, as the console's login or the CLI finds them."""
        found = self.ops.approvers().authenticate(token)
        assert found is not None
        return found

    def digest(self, sik: str) -> str:
        """The terms digest `holds list` shows for this held call (what an approver approves)."""
        intent = self.engine.intent(sik)
        assert intent is not None
        return holds.terms_digest(intent)

    def approve(self, sik: str, reason: str = "checked", **kwargs: Any) -> holds.Released:
        """Approve as APPROVER, for the terms as they are now (the common case of these tests)."""
        if "approver" not in kwargs:
            kwargs["approver"] = self.approver()
        if "terms_digest" not in kwargs:
            kwargs["terms_digest"] = self.digest(sik)
        return holds.approve(kwargs.pop("ops", self.ops), sik, reason=reason, **kwargs)


def write_approvers(path: Path, tokens: dict[str, str] | None = None) -> Path:
    tokens = tokens if tokens is not None else {APPROVER: APPROVER_TOKEN, OTHER: OTHER_TOKEN}
    lines = ["approvers:", *(yaml_entry(who, token_sha256(token)) for who, token in tokens.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ops_context_for(engine: Engine, monkeypatch: pytest.MonkeyPatch, **env: str) -> OpsContext:
    """The operator's configuration is the stack's: same ledger, Redis, mandate and rail."""
    stack_env = engine.stack.base_env()
    for name in ("INTERLOCK_LEDGER", "REDIS_URL", "INTERLOCK_MANDATE", "INTERLOCK_RAIL_URL", "INTERLOCK_RAIL_KEY_ID",
                 "INTERLOCK_RAIL_KEY_SECRET"):  # fmt: skip
        monkeypatch.setenv(name, stack_env[name])
    approvers = engine.stack.data_dir / "approvers.yaml"
    if not approvers.exists():
        write_approvers(approvers)
    monkeypatch.setenv("INTERLOCK_APPROVERS", str(approvers))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return OpsContext.from_settings(load_settings())


@pytest.fixture
def operated(engine_factory: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch) -> Iterator[Operated]:  # noqa: F811
    engine = engine_factory()
    yield Operated(engine, ops_context_for(engine, monkeypatch))
