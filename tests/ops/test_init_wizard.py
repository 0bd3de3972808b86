"""`interlock init`: numbered questions (payouts and the hold threshold among them), a reviewed mandate, and nothing
written without a person's yes."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from interlock.cli import cli
from interlock.mandate import load_mandate
from interlock.tools import current_pins
from ops.mandate_cli import init_command, parse_amount


def run_init(out: Path, answers: list[str], *args: str) -> Result:
    return CliRunner().invoke(cli, ["init", "--out", str(out), *args], input="\n".join(answers) + "\n")


def test_answers_become_a_mandate_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "mandate.yaml"
    answers = ["acc_DEMO000001", "agent_support_bot", "both", "5000", "20000", "", "ops_lead@example.com", "y"]
    result = run_init(out, answers)
    assert result.exit_code == 0, result.output
    m = load_mandate(out)
    assert (m.merchant_id, m.agent_id) == ("acc_DEMO000001", "agent_support_bot")
    refund = m.grant("create_refund")
    assert refund is not None and refund.value is not None
    assert refund.value.max_amount_minor == 500000 and refund.value.currencies == ["INR"]
    assert m.limits.windows[0].max_amount_minor == 2000000 and m.limits.windows[0].window_ms == 86400000
    assert m.approval.approvers == ["ops_lead@example.com"]
    assert m.approval.hold_above_minor is not None and m.approval.hold_above_minor < 500000
    assert m.window_ms("create_instant_settlement") == 86400000 and m.window_ms("create_refund") is None
    assert "INR" in m.limits.fee_budgets
    assert m.pin("create_refund") == current_pins()["create_refund"]
    # The person saw exactly the hash of what was written.
    assert f"mandate_hash: {m.mandate_hash}" in result.output
    assert "Write this mandate? [y/N]" in result.output


def test_identity_from_options_and_paise_answers(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(
        out, ["refunds", "250000p", "1000000 paise", "", "a@example.com, b@example.com", "y"],
        "--merchant-id", "acc_1", "--agent-id", "agent_1",
    )
    assert result.exit_code == 0, result.output
    m = load_mandate(out)
    assert m.grant("create_instant_settlement") is None
    grant = m.grant("create_refund")
    assert grant is not None and grant.value is not None and grant.value.max_amount_minor == 250000
    assert m.approval.approvers == ["a@example.com", "b@example.com"]


def test_read_only_mandate_grants_no_money_tool(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(out, ["acc_1", "agent_1", "read-only", "ops@example.com", "y"])
    assert result.exit_code == 0, result.output
    assert not {"create_refund", "create_instant_settlement"} & set(load_mandate(out).scope.grants)


def test_answering_no_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "mandate.yaml"
    result = run_init(out, ["acc_1", "agent_1", "refunds", "5000", "20000", "", "ops@example.com", "n"])
    assert result.exit_code != 0
    assert "Nothing written" in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_no_answer_at_the_confirmation_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "mandate.yaml"
    result = run_init(out, ["acc_1", "agent_1", "refunds", "5000", "20000", "", "ops@example.com"])  # input ends
    assert result.exit_code != 0 and not out.exists()


def test_there_is_no_way_to_skip_the_confirmation() -> None:
    flags = {opt for param in init_command.params for opt in param.opts}
    assert not flags & {"--yes", "-y", "--force", "--no-input", "--non-interactive"}


def test_decimals_beyond_paise_are_refused_and_asked_again(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(out, ["acc_1", "agent_1", "refunds", "50.005", "50.05", "100.999", "100", "", "ops@x", "y"])
    assert result.exit_code == 0, result.output
    assert result.output.count("more than 2 decimal places") == 2
    grant = load_mandate(out).grant("create_refund")
    assert grant is not None and grant.value is not None and grant.value.max_amount_minor == 5005


def test_daily_cap_below_the_per_action_maximum_is_asked_again(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(out, ["acc_1", "agent_1", "refunds", "5000", "1000", "20000", "", "ops@x", "y"])
    assert result.exit_code == 0, result.output
    assert "daily cap must be at least" in result.output
    assert load_mandate(out).limits.windows[0].max_amount_minor == 2000000


def test_existing_file_is_kept_unless_overwrite_is_confirmed(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    out.write_text("keep me")
    answers = ["acc_1", "agent_1", "refunds", "5000", "20000", "", "ops@x", "y"]
    result = run_init(out, [*answers, "n"])
    assert result.exit_code != 0 and out.read_text() == "keep me"
    result = run_init(out, [*answers, "y"])
    assert result.exit_code == 0 and load_mandate(out).agent_id == "agent_1"


def test_bad_identity_is_asked_again(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(out, ["acc 1", "acc_1", "agent_1", "read-only", "ops@x", "y"])
    assert result.exit_code == 0, result.output
    assert load_mandate(out).merchant_id == "acc_1"


@pytest.mark.parametrize(
    ("text", "paise"),
    [("5000", 500000), ("5,000.5", 500050), ("Rs 49.99", 4999), ("₹1", 100), ("250p", 250), ("7 paise", 7)],
)
def test_amounts_convert_to_integer_paise(text: str, paise: int) -> None:
    assert parse_amount(text) == paise


@pytest.mark.parametrize("text", ["50.005", "0", "0.00", "-5", "1e3", "12.5p", "five", ""])
def test_malformed_amounts_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_amount(text)


def test_payouts_ask_the_account_the_payees_and_what_happens_to_anyone_else(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    answers = ["acc_1", "agent_1", "payouts", "5000", "20000", "1000", "7878780080316316",
               "fa_DEMOVENDOR0001, cont_DEMOVPA0000001", "hold", "ops@example.com", "y"]  # fmt: skip
    result = run_init(out, answers)
    assert result.exit_code == 0, result.output
    m = load_mandate(out)
    grant = m.grant("create_payout")
    assert grant is not None and grant.payees is not None
    assert (grant.payees.fund_account_ids, grant.payees.contact_ids, grant.payees.unlisted) == (
        ["fa_DEMOVENDOR0001"], ["cont_DEMOVPA0000001"], "hold")
    assert m.rail.account_number == "7878780080316316" and m.window_ms("create_payout") == 86400000
    assert m.approval.hold_above_minor == 100000 and "INR" in m.limits.fee_budgets
    # Every question is numbered as it is asked, one to eight, and none is said to be skipped.
    numbers = [int(line.split(".")[0]) for line in result.output.splitlines() if line[:1].isdigit() and ". " in line]
    assert numbers == list(range(1, 9)), result.output
    assert "four" not in result.output and "Skipped" not in result.output


def test_a_hold_threshold_no_call_could_reach_is_asked_again_and_none_is_an_answer(tmp_path: Path) -> None:
    out = tmp_path / "m.yaml"
    result = run_init(out, ["acc_1", "agent_1", "refunds", "5000", "20000", "5000", "none", "ops@x", "y"])
    assert result.exit_code == 0, result.output
    assert "no call would ever wait" in result.output
    assert load_mandate(out).approval.hold_above_minor is None
    offered = run_init(tmp_path / "d.yaml", ["acc_1", "agent_1", "refunds", "5000", "20000", "", "ops@x", "y"])
    assert "[Rs 3,000.00]" in offered.output and load_mandate(tmp_path / "d.yaml").approval.hold_above_minor == 300000


def test_a_payee_id_of_another_shape_is_asked_again(tmp_path: Path) -> None:
    answers = ["acc_1", "agent_1", "payouts", "5000", "20000", "", "7878780080316316", "vendor-42",
               "fa_DEMOVENDOR0001", "", "ops@x", "y"]  # fmt: skip
    result = run_init(tmp_path / "m.yaml", answers)
    assert result.exit_code == 0, result.output
    assert "not vendor-42" in result.output
