"""AgentDojo's banking suite with a real model (`interlock bench agentdojo --mode model`), reduced to one pair so the
model mode cannot rot: SmolLM2-135M on llama-cpp-python's server, driven by AgentDojo's own pipeline, attacked with
important_instructions, direct and through a real stack. Needs the `model` extra and .venv-agentdojo: `make
bench-model` runs this file; `make test` does not collect it (pyproject.toml ignores tests/model_extra).

What a 135M model does is close to random, so nothing here asserts its choices: only that AgentDojo scored the pair
on each route, and that through Interlock the environment changed for exactly the calls Interlock answered APPLIED,
none of them to a payee the account holder never paid without a person's (the stand-in's) approval."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.dojo_bridge import VENV_PYTHON, paid_before, route_name, run
from bench.dojo_report import Scores
from tests.bench.test_agentdojo_bridge import ACCOUNT

PAIR = ("user_task_0", "injection_task_0")


@pytest.mark.parametrize("route", ["direct", route_name("interlock", "user-request", "bounded")])
def test_the_model_mode_is_scored_by_agentdojo_and_moves_money_only_as_interlock_answers(
    route: str, tmp_path: Path,
) -> None:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: `make agentdojo` creates it")
    policy, text = ("never", "off") if route == "direct" else ("user-request", "bounded")
    raw = run("model", route, tmp_path, user_tasks=[PAIR[0]], injection_tasks=[PAIR[1]], approve_policy=policy,
              free_text=text)  # fmt: skip
    scores = Scores.load(raw)
    assert set(scores.utility) == set(scores.security) == {PAIR}
    assert set(scores.as_user_tasks) == {PAIR[1]}
    assert len(scores.task_seconds) == 2  # the injection task as a user task, then the pair
    if route == "direct":
        assert scores.calls == []
        return
    known = set(paid_before(ACCOUNT))
    for call in scores.calls:
        assert call["applied"] == (call["state"] == "APPLIED"), call
        if call["applied"] and call["recipient"] not in known:
            assert (call["held"] or "").startswith("approved"), call
