"""Settings that can never act (interlock/mandate_inert.py, issue 48 item 4): `mandate check` names each one; the
example mandate has none; an agent without a mandate is told which files were read and whom they are for."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli import cli
from interlock.errors import MandateError
from interlock.mandate import MandateStore
from interlock.mandate_inert import inert_settings
from tests.mandates import EXAMPLE, make_mandate, write_mandate

NOW = 1_800_000_000_000


def test_the_example_mandate_has_nothing_inert() -> None:
    assert inert_settings(make_mandate(), now_ms=make_mandate().issued_at) == []


@pytest.mark.parametrize(("changes", "says"), [
    ({"approval.hold_above_minor": 500_000}, "no create_refund call can ever be held for its amount"),
    ({"limits.windows": [{"window_ms": 86_400_000, "max_calls": 10, "max_amount_minor": 50, "currency": "INR"}]},
     "no create_refund call can ever pass"),
    ({"limits.windows": [{"window_ms": 86_400_000, "max_calls": 10, "max_amount_minor": 200_000, "currency": "INR"}]},
     "no single create_refund call above 200000 can ever pass"),
    ({"idempotency.create_instant_settlement": {"window_ms": 600_000}}, "reaches back across a whole window"),
    ({"scope.grants.create_payout.free_text": {"fixed": {"fa_SOMEONEELSE001": "Rent"}}},
     "its narration can never be sent"),
    ({"expires_at": NOW - 1}, "has passed"),
    ({"expires_at": NOW + 2 * 86_400_000}, "2.0 days away"),
])  # fmt: skip
def test_each_setting_that_can_never_act_is_named(changes: dict[str, object], says: str) -> None:
    mandate = make_mandate({"issued_at": NOW - 86_400_000, "expires_at": NOW + 30 * 86_400_000, **changes})
    said = inert_settings(mandate, now_ms=NOW)
    assert any(says in line for line in said), said


def test_mandate_check_prints_the_warnings_and_still_passes(tmp_path: Path) -> None:
    path = write_mandate(tmp_path / "m.yaml", {"approval.hold_above_minor": 10_000_000})
    result = CliRunner().invoke(cli, ["mandate", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning: approval.hold_above_minor (10000000) is at or above create_refund's max_amount_minor" in (
        result.output)


def test_an_agent_without_a_mandate_is_told_the_files_read_and_the_agents_they_have() -> None:
    store = MandateStore.load([EXAMPLE])
    with pytest.raises(MandateError) as refused:
        store.require("agent_typo")
    assert str(EXAMPLE) in str(refused.value) and "agent_demo" in str(refused.value)
    with pytest.raises(MandateError, match="no mandate is configured"):
        MandateStore({}).require("agent_demo")
