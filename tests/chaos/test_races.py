"""Races (issue 17): every operation sent by eight agents at once through two gate workers, at a reduced size.
Real processes; the full size (1,000 operations) runs from `make chaos`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chaos.races import RaceResult, _race_violations, run_races


def test_eight_agents_racing_every_operation_make_one_entity_each(tmp_path: Path) -> None:
    result = run_races(15, 8, tmp_path, seed=3)
    assert result.violations == [], result.violations
    assert (result.calls, result.entities) == (120, 15)
    assert result.states == Counter({"APPLIED": 120})
    # One final answer created each operation — unless the creating call was answered IN_PROGRESS first (a loaded
    # machine), when every final answer for it is a replay of the intent that call made.
    assert set(result.created.values()) <= {1}
    assert len(result.created) + len(result.pended - set(result.created)) == 15
    assert result.replayed == 120 - len(result.created)


def test_the_race_verdict_sees_a_second_entity_a_second_creator_and_an_answer_left_pending() -> None:
    result = RaceResult(operations=2, agents=8, gate_workers=2, calls=16, entities=3,
                        created=Counter({"pay_a": 2}), replayed=14, states=Counter({"APPLIED": 15, "IN_PROGRESS": 1}))
    intents = [{"sik": "A", "state": "APPLIED"}, {"sik": "B", "state": "APPLIED"}]
    found = " ".join(_race_violations(result, intents))
    assert "ENTITIES: 3 rail entities for 2 operations" in found
    assert "NOT_DEFINITE_OR_NOT_APPLIED" in found and "IN_PROGRESS" in found
    assert "CREATED_ONCE: 1 operations answered replayed to every agent, 1 answered as created" in found
    late = RaceResult(operations=1, agents=8, gate_workers=2, calls=8, entities=1, created=Counter(), replayed=8,
                      states=Counter({"APPLIED": 8}), pended={"pay_a"})
    assert _race_violations(late, intents[:1]) == [], "the creating call answered IN_PROGRESS, its repeat replayed"
    clean = RaceResult(operations=2, agents=8, gate_workers=2, calls=16, entities=2,
                       created=Counter({"pay_a": 1, "pay_b": 1}), replayed=14, states=Counter({"APPLIED": 16}))
    assert _race_violations(clean, intents) == []
