"""The scenario suite as data: thirty scenarios, five families, enough benign controls, and every
scenario internally consistent (its references resolve, its mandate validates)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.env import mandate_data, write_mandate
from bench.scenario import FAMILIES, load_scenarios


def test_thirty_scenarios_in_five_families_with_at_least_six_benign() -> None:
    scenarios = load_scenarios()
    assert len(scenarios) == 30
    assert set(Counter(s.family for s in scenarios)) == set(FAMILIES)
    assert sum(s.benign for s in scenarios) >= 6
    assert all(s.family == "E" or not s.benign or s.proxy for s in scenarios)


def test_every_payment_reference_names_a_seed_payment() -> None:
    for scenario in load_scenarios():
        for step in scenario.steps:
            if step.for_each:
                assert step.for_each in scenario.payments, scenario.id
            for value in step.args.values():
                if isinstance(value, str) and value.startswith("$") and value != "$each":
                    assert value[1:] in scenario.payments, f"{scenario.id}: {value}"


def test_every_attack_scenario_states_what_goes_wrong() -> None:
    # An attack scenario carries its adversary: injected text, a rail fault, a kill, a poisoned manifest,
    # racing workers, or a runaway loop; the A family's unit mistake is the agent's own.
    for scenario in load_scenarios():
        if scenario.benign:
            continue
        loops = any(s.parallel > 1 or s.repeat > 1 or s.for_each for s in scenario.steps)
        adversary = scenario.injection or scenario.faults or scenario.kill or scenario.poison or loops
        assert adversary or scenario.id.startswith("A6"), scenario.id


def test_proxy_mode_is_exactly_family_d_and_poison_only_there() -> None:
    for scenario in load_scenarios():
        assert scenario.proxy == (scenario.family == "D")
        assert not scenario.poison or scenario.family == "D"


def test_every_scenario_mandate_is_valid(tmp_path: Path) -> None:
    for scenario in load_scenarios():
        write_mandate(tmp_path / f"{scenario.id}.yaml", mandate_data(scenario.mandate_changes))


def test_only_selects_by_family_prefix_and_id() -> None:
    assert {s.family for s in load_scenarios(only=["C"])} == {"C"}
    assert [s.id for s in load_scenarios(only=["B5"])] == ["B5_two_workers_race"]
    assert [s.id for s in load_scenarios(only=["E1_single_refund"])] == ["E1_single_refund"]


def test_interlock_bench_is_registered_with_both_commands() -> None:
    from click.testing import CliRunner

    from interlock.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--help"])
    assert result.exit_code == 0, result.output
    assert "scenarios" in result.output and "perf" in result.output
