"""Quarantine (reconciler/loop.py `_should_quarantine`, `_quarantine_reason`, `_attempt_started_at`): an UNKNOWN
intent the rail's lists never settle is QUARANTINED with RECONCILE_EXHAUSTED after reconcile.max_passes passes, or
once its latest attempt is older than reconcile.max_age_ms — never before the rail has been read once. The pass
that quarantines reads nothing and records why, in whole seconds since the attempt started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.db import open_ledger, transaction
from ledger.states import State
from rails.razorpay import RailError, RailErrorKind
from tests.engine.send_world import T0, World, make_world
from tests.mandates import MERCHANT
from tests.reconciler.recon_world import (
    OWNER,
    SIK,
    audit_mark,
    audit_since,
    findings,
    reconcile_started,
    transition_row,
    unknown,
)

READY = 3000 + 1000 + 500


def _world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, passes: int = 20, age_ms: int = 600_000) -> World:
    world = make_world(tmp_path, monkeypatch, reconcile_max_passes=passes, reconcile_max_age_ms=age_ms)
    unknown(world, open_ledger(world.path))

    def lists_time_out(**kwargs: Any) -> Any:
        raise RailError(RailErrorKind.AMBIGUOUS, "list timed out", method="GET", path="/settlements")

    world.rail.list_instant_settlements = lists_time_out  # type: ignore[method-assign]
    return world


def _pass(world: World, at: int) -> list[tuple[str, int, dict[str, Any]]]:
    world.clock.ms = at
    mark = audit_mark(world)
    assert world.reconciler().reconcile(MERCHANT, SIK) is True
    return audit_since(world, mark)


def _quarantined(at: int, passes: int, age_s: int) -> list[tuple[str, int, dict[str, Any]]]:
    reason = f"unsettled after {passes} reconcile passes, {age_s}s after the attempt started"
    return [("TRANSITION", at, transition_row("QUARANTINE", "UNKNOWN", "QUARANTINED", actor=OWNER,
                                              detail={"reason": reason},
                                              sets={"reason_code": "RECONCILE_EXHAUSTED"}))]  # fmt: skip


_started = reconcile_started


def test_an_intent_is_quarantined_on_the_pass_after_max_passes_inconclusive_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    world = _world(tmp_path, monkeypatch, passes=2)
    assert _pass(world, T0 + READY)[0] == _started(T0 + READY)
    assert _pass(world, T0 + 6000)[0] == _started(T0 + 6000)
    assert world.intent().reconcile_attempts == 2
    assert _pass(world, T0 + 9000) == _quarantined(T0 + 9000, 2, 9)
    intent = world.intent()
    assert (intent.state, intent.reason_code, intent.reconcile_attempts) == (
        State.QUARANTINED, "RECONCILE_EXHAUSTED", 2)
    assert len(findings(world)) == 2, "the quarantining pass reads nothing"


def test_fewer_passes_than_the_cap_on_a_young_attempt_keep_reading(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world(tmp_path, monkeypatch, passes=3)
    for at in (T0 + READY, T0 + 6000, T0 + 9000):
        assert _pass(world, at)[0] == _started(at)
    assert (world.intent().state, world.intent().reconcile_attempts) == (State.UNKNOWN, 3)


@pytest.mark.parametrize(("age", "quarantined"), [(60_000, False), (60_001, True), (60_999, True)])
def test_an_intent_is_quarantined_once_its_attempt_is_older_than_max_age(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age: int, quarantined: bool) -> None:  # fmt: skip
    world = _world(tmp_path, monkeypatch, age_ms=60_000)
    _pass(world, T0 + READY)  # read once: age alone never quarantines before that
    events = _pass(world, T0 + age)
    if quarantined:
        assert events == _quarantined(T0 + age, 1, 60)
        assert (world.intent().state, world.intent().reason_code) == (State.QUARANTINED, "RECONCILE_EXHAUSTED")
    else:
        assert events[0] == _started(T0 + age)
        assert world.intent().state is State.UNKNOWN


def test_age_alone_never_quarantines_an_intent_the_rail_was_not_yet_read_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    world = _world(tmp_path, monkeypatch, age_ms=60_000)
    assert _pass(world, T0 + 120_000)[0] == _started(T0 + 120_000)
    assert (world.intent().state, world.intent().reconcile_attempts) == (State.UNKNOWN, 1)


def test_the_age_counts_from_the_latest_attempts_start_not_the_last_update(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    world = _world(tmp_path, monkeypatch, age_ms=60_000)
    _pass(world, T0 + 50_000)  # the row's updated_at is now T0 + 50 s; its attempt started at T0
    assert _pass(world, T0 + 60_001) == _quarantined(T0 + 60_001, 1, 60)


@pytest.mark.parametrize(("after_pass", "quarantined"), [(60_000, False), (61_500, True)])
def test_without_an_attempt_row_the_age_counts_from_the_last_update(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after_pass: int, quarantined: bool) -> None:  # fmt: skip
    world = _world(tmp_path, monkeypatch, age_ms=60_000)
    _pass(world, T0 + READY)
    conn = open_ledger(world.path)
    with transaction(conn):
        conn.execute("DELETE FROM intent_attempts WHERE sik = ?", (SIK,))
    events = _pass(world, T0 + READY + after_pass)
    if quarantined:
        assert events == _quarantined(T0 + READY + after_pass, 1, 61)
    else:
        assert events[0] == _started(T0 + READY + after_pass)
