"""A shard's machine lost mid-run and the shard restored from its replica (simulation.machine_loss; issue 45): the
seeds that lose one find nothing wrong, the restore has work to do in them, and the checker names what a restore
that went wrong would leave behind."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulation import machine_loss
from simulation.checker import ShardEvidence, check_workload
from simulation.machine_loss import plan_loss
from simulation.run import MACHINE_LOSS, quiet_logs, run_seed
from tests.simulation.test_simulation import _Action, _Answer

LOSS = frozenset({MACHINE_LOSS})


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    quiet_logs()
    yield
    logging.disable(logging.NOTSET)


def _restores(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """The loss records of the seeds run after this (install_loss hands each its workload's list)."""
    records: list[dict[str, object]] = []
    install = machine_loss.install_loss

    def keep(world, p, w):  # type: ignore[no-untyped-def]
        install(world, p, w)
        if p.on:
            records.append(p.record)

    monkeypatch.setattr("simulation.run.install_loss", keep)
    return records


def test_seeds_that_lose_a_machine_find_no_violation_and_the_restore_has_work_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = _restores(monkeypatch)
    results = [run_seed(seed, focus=LOSS) for seed in range(1, 21)]
    assert [(r.seed, [str(v) for v in r.violations]) for r in results if not r.ok] == []
    assert all(r.faults["machine_loss"] == 1 for r in results)
    assert len(records) == 20 and all(r["restore"] for r in records)
    # What makes the restore's work real: a replica behind the lost ledger, a request on the wire, a paused machine,
    # entities recovered from the rail, what was in motion made UNKNOWN, and agents asking again.
    assert any(r["commits_behind"] for r in records) and any(r["on_the_wire"] for r in records)
    assert any(r["paused"] for r in records) and any(not r["paused"] for r in records)
    assert sum(r["restore"]["recovered"] for r in records) > 0  # type: ignore[index]
    assert sum(r["restore"]["made_unknown"] for r in records) > 0  # type: ignore[index]
    assert sum(r["asked_again"] for r in records) > 0  # type: ignore[misc]
    edges = set().union(*(r.edges for r in results))
    assert {"PROPOSED -RECOVERED_FROM_RAIL-> APPLIED", "IN_FLIGHT -RESTORED_UNSETTLED-> UNKNOWN"} <= edges


def test_a_seed_without_the_loss_runs_as_it_did_and_the_focus_displaces_the_move() -> None:
    plain = next(seed for seed in range(1, 200) if not plan_loss(seed).on)
    assert run_seed(plain).faults["machine_loss"] == 0
    assert plan_loss(plain, focus=LOSS).on and not plan_loss(plain, focus=LOSS, move=True).on
    assert not plan_loss(plain, frozenset({MACHINE_LOSS}), LOSS).on


def test_a_paused_machine_that_wakes_unfenced_sends_and_the_checker_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore is only as good as its fence: with the fence taken away, a paused machine that wakes sends what
    it still had in hand, and FENCED names it."""
    records = _restores(monkeypatch)
    monkeypatch.setattr(machine_loss, "fence", lambda world, shard, lost: None)
    for seed in range(1, 120):
        if not plan_loss(seed, focus=LOSS).paused:
            continue
        result = run_seed(seed, focus=LOSS)
        if any(v.kind == "FENCED" for v in result.violations):
            assert records[-1]["sent_after_fence"]
            return
    pytest.fail("no paused machine sent after its fence was taken away")


def _told(action: _Action, state: str, entity: str | None, action_word: str = "DONE") -> _Answer:
    return _Answer(action, {"state": state, "rail_entity_id": entity, "caller_action": action_word, "sik": "S"})


def _empty_ledger(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE intents (merchant_id, sik, state)")
    conn.execute("CREATE TABLE audit_log (seq, ts, kind, payload_json, prev_hash, hash)")
    conn.execute("CREATE TABLE rail_status (merchant_id, sik, attention)")
    conn.commit()
    conn.close()
    return path


def test_the_checker_names_an_answer_contradicted_after_a_restore_and_a_restore_refused(tmp_path: Path) -> None:
    paid, refused = (_Action("a", "s0", "create_refund", f"pay_{n}", 500 + n) for n in (1, 2))
    answers = [_told(paid, "APPLIED", "rfnd_1"), _told(refused, "BLOCKED", None, "DO_NOT_RETRY"),
               _Answer(paid, {"state": "IN_PROGRESS", "caller_action": "RETRY_SAME_CALL"}),  # not definite: not judged
               _told(paid, "APPLIED", "rfnd_1")]  # fmt: skip
    record = {"shard": "s0", "answers_before": 2, "lost_mono_ms": 5_000, "refused": None, "sent_after_fence": []}
    shards = [ShardEvidence("s0", _empty_ledger(tmp_path / "l.sqlite3"), [], {})]
    assert check_workload(shards, [paid, refused], answers, {}, {"restores": [record]}) == []
    answers += [_told(paid, "BLOCKED", None, "DO_NOT_RETRY"), _told(refused, "APPLIED", "rfnd_9"),
                _told(paid, "APPLIED", "rfnd_2")]  # fmt: skip
    record.update(refused="gave up after 30 runs", sent_after_fence=["lost/rail-a:s0 at mono 9000"])
    found = check_workload(shards, [paid, refused], answers, {}, {"restores": [record]})
    assert sorted(v.kind for v in found) == ["FENCED", "RESTORE_CONTRADICTED", "RESTORE_CONTRADICTED",
                                             "RESTORE_CONTRADICTED", "RESTORE_REFUSED"]  # fmt: skip
    # An answer before the loss from another shard, or after it for an action never told anything, is not judged.
    record.update(refused=None, sent_after_fence=[])
    assert check_workload(shards, [paid], [_Answer(paid, answers[0].structured, "s1"), *answers[4:5]], {},
                          {"restores": [record]}) == []  # fmt: skip
