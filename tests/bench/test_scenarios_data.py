"""The scenario suite as data: thirty-nine scenarios, six families, enough benign controls, and every
scenario internally consistent (its references resolve, its mandate validates, its ticket signs)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from bench.env import mandate_data, payee_id, write_mandate
from bench.scenario import FAMILIES, load_scenarios
from bench.ticket import binding_required, payment_details, ticket_meta
from interlock.clock import now_ms
from interlock.mandate import validate_mandate
from interlock.task import TASK_META_KEY, TASK_SIG_META_KEY, VerifiedTask, verify_task
from interlock.tools import FUND_ACCOUNT_PATTERN


def test_thirty_nine_scenarios_in_six_families_with_at_least_six_benign() -> None:
    scenarios = load_scenarios()
    assert len(scenarios) == 39
    # The seed's structuring and staged-precondition attacks, under the seed's own numbers.
    assert {"A10_split_refund_structuring", "A14_settlement_staged_before_refund"} <= {s.id for s in scenarios}
    assert set(Counter(s.family for s in scenarios)) == set(FAMILIES)
    assert sum(s.benign for s in scenarios) >= 6
    # Benign controls are family E's, or a proxy's or payout family's own (which need their own rail or mandate).
    assert all(s.family in ("E", "P") or not s.benign or s.proxy for s in scenarios)


def test_every_payment_reference_names_a_seed_payment_or_payee() -> None:
    for scenario in load_scenarios():
        for step in scenario.steps:
            if step.for_each:
                assert step.for_each in scenario.payments, scenario.id
            for value in step.args.values():
                if isinstance(value, str) and value.startswith("$") and value != "$each":
                    assert value[1:] in {*scenario.payments, *scenario.payees}, f"{scenario.id}: {value}"
            if step.tool == "create_payout":
                assert step.args["fund_account_id"][1:] in scenario.payees, scenario.id


def test_every_attack_scenario_states_what_goes_wrong() -> None:
    # An attack scenario carries its adversary: injected text, a rail fault, a kill, a poisoned manifest,
    # racing workers, a runaway loop, or a mandate withdrawn under a waiting payout; the A family's unit mistake
    # is the agent's own.
    for scenario in load_scenarios():
        if scenario.benign:
            continue
        loops = any(s.parallel > 1 or s.repeat > 1 or s.for_each for s in scenario.steps)
        adversary = (scenario.injection or scenario.faults or scenario.kill or scenario.poison or loops
                     or scenario.withdrawal)  # fmt: skip
        assert adversary or scenario.id.startswith("A6"), scenario.id


def test_proxy_mode_is_exactly_family_d_and_poison_only_there() -> None:
    for scenario in load_scenarios():
        assert scenario.proxy == (scenario.family == "D")
        assert not scenario.poison or scenario.family == "D"


def test_every_scenario_mandate_is_valid(tmp_path: Path) -> None:
    for scenario in load_scenarios():
        write_mandate(tmp_path / f"{scenario.id}.yaml", mandate_data(scenario.mandate_changes))
        required = {**scenario.mandate_changes, **binding_required()}
        assert write_mandate(tmp_path / f"{scenario.id}-task.yaml", mandate_data(required)).exists()


def test_every_benign_scenario_has_a_ticket_so_required_binding_blocks_no_benign_task() -> None:
    assert all(s.ticket is not None for s in load_scenarios() if s.benign)


def test_a_ticket_signs_as_a_task_the_task_mode_mandate_verifies() -> None:
    [scenario] = load_scenarios(only=["B2"])
    payments = {"order": [f"pay_B2t_order{i}" for i in range(10)]}
    customers = {pid: "Batch Customer" for pid in payments["order"]}
    mandate = validate_mandate(mandate_data(binding_required()))
    meta = ticket_meta(scenario, payments, customers, "B2-task", merchant_id=mandate.merchant_id,
                       agent_id=mandate.agent_id)  # fmt: skip
    assert meta is not None
    verified = verify_task(meta[TASK_META_KEY], meta[TASK_SIG_META_KEY], mandate.task_signers, now_ms())
    assert isinstance(verified, VerifiedTask), verified
    # v2: the ticket names the stack's merchant and the one agent the bench drives (SPEC §10).
    assert verified.audience_problem(mandate.merchant_id, mandate.agent_id) is None
    grant = verified.grant("create_refund")
    assert grant is not None and grant.subjects == payments["order"] and grant.max_amount_minor == 300_000


def test_a_ticket_naming_a_customer_matches_the_customer_the_payment_is_seeded_with() -> None:
    [scenario] = load_scenarios(only=["A5"])
    payments, customers = {"mine": ["pay_A5t_mine0"], "other": ["pay_A5t_other0"]}, {
        "pay_A5t_mine0": "Asha Rao", "pay_A5t_other0": "Vikram Shah"}  # fmt: skip
    meta = ticket_meta(scenario, payments, customers, "A5-task", merchant_id="acc_DEMO000001", agent_id="agent_demo")
    assert meta is not None
    customer = meta[TASK_META_KEY]["grants"]["create_refund"]["customer_id"]
    assert customer == payment_details("pay_A5t_mine0", "Asha Rao")["customer_id"] == "cust_AshaRao"
    assert customer != payment_details("pay_A5t_other0", "Vikram Shah")["customer_id"]


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


def test_every_payee_has_a_fund_account_id_of_razorpayx_shape_of_its_own() -> None:
    seen: dict[str, str] = {}
    for scenario in load_scenarios(only=["P"]):
        for name in scenario.payees:
            fund_account = payee_id(scenario.id, name)
            assert re.fullmatch(FUND_ACCOUNT_PATTERN, fund_account), fund_account
            assert seen.setdefault(fund_account, f"{scenario.id}.{name}") == f"{scenario.id}.{name}", fund_account
    # P1's injected text names the stranger by the id the rail knows it by.
    [p1] = load_scenarios(only=["P1"])
    assert p1.injection is not None and payee_id(p1.id, "stranger") in p1.injection
