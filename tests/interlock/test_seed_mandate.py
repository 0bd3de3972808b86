"""The seed's own example mandate (shared/seeds, "The Human-Approved Mandate") loads unchanged, and each of the
format's extensions does what SPEC §11 says: a read-only grant's zero value, window_ms null, key_fields the SIK
already covers, manifest_sha256 and trust_tier recorded — while unknown keys are still errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gate_workers.gates import g6_provenance
from interlock.cli import cli
from interlock.errors import MandateError
from interlock.mandate import load_mandate, parse_mandate
from tests.gate_workers.factories import context, refund_action
from tests.mandates import make_mandate

SEED = Path(__file__).resolve().parent / "fixtures" / "seed_mandate.yaml"
SEED_TEXT = SEED.read_text(encoding="utf-8")


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def refused(text: str) -> str:
    with pytest.raises(MandateError) as err:
        parse_mandate(text, source="seed.yaml")
    return str(err.value)


def test_the_seed_mandate_loads_verbatim() -> None:
    mandate = load_mandate(SEED)
    assert mandate.mandate_id == "mnd_support_tier1"
    assert mandate.agent_id == "agent_support_bot"
    assert mandate.task_binding == "optional"  # the default: a task is enforced when one is attached


def test_interlock_mandate_check_passes_on_the_seed_mandate() -> None:
    result = CliRunner().invoke(cli, ["mandate", "check", str(SEED)])
    assert result.exit_code == 0, result.output
    assert "ok: mnd_support_tier1" in result.output
    # Its pins are of the upstream razorpay-mcp server's tools, which G6 compares with what that server serves.
    assert "for upstream razorpay-mcp@0.1.0 (trust_tier pinned)" in result.output
    assert "manifest_sha256: 3721a7f7b443e157669ccc9ed27ccaf4daa2d67dc8367bc1481e2e2b8c4d6c6c" in result.output


def test_a_read_only_grant_may_say_it_moves_no_money() -> None:
    grant = load_mandate(SEED).grant("fetch_payment")
    assert grant is not None and grant.value is not None
    assert (grant.value.min_amount_minor, grant.value.max_amount_minor) == (0, 0)


def test_a_read_only_grant_may_not_carry_a_real_value_range() -> None:
    message = refused(SEED_TEXT.replace("        max_amount_minor: 0\n", "        max_amount_minor: 100\n", 1))
    assert f"seed.yaml:{line_of(SEED_TEXT, '    fetch_payment:') + 2}: scope.grants.fetch_payment.value:" in message
    assert "moves no money" in message


def test_a_money_grant_may_not_be_zero() -> None:
    text = SEED_TEXT.replace("max_amount_minor: 500000", "max_amount_minor: 0").replace(
        "min_amount_minor: 100 ", "min_amount_minor: 0 ")  # fmt: skip
    message = refused(text)
    assert "scope.grants.create_refund.value.max_amount_minor: create_refund moves money" in message
    assert "scope.grants.create_refund.value.min_amount_minor: create_refund moves money" in message


def test_window_ms_null_is_permanent_uniqueness() -> None:
    mandate = load_mandate(SEED)
    assert mandate.idempotency["create_refund"].window_ms is None
    assert mandate.window_ms("create_refund") is None  # the SIK's window: null, two identical refunds are one


def test_a_settlement_still_needs_a_window_even_written_null() -> None:
    with pytest.raises(MandateError, match="idempotency.create_instant_settlement.window_ms must be set"):
        make_mandate({"idempotency.create_instant_settlement.window_ms": None})


def test_key_fields_the_sik_covers_are_accepted() -> None:
    mandate = load_mandate(SEED)
    assert mandate.idempotency["create_refund"].key_fields == ["payment_id"]
    text = SEED_TEXT.replace("key_fields: [payment_id]", "key_fields: [payment_id, amount, interlock_distinct_reason]")
    assert parse_mandate(text).idempotency["create_refund"].key_fields == [
        "payment_id", "amount", "interlock_distinct_reason"]  # fmt: skip


def test_key_fields_naming_a_field_the_sik_does_not_cover_are_refused_with_file_and_line() -> None:
    text = SEED_TEXT.replace("    key_fields: [payment_id]\n", "    key_fields:\n      - payment_id\n      - email\n")
    message = refused(text)
    assert f"seed.yaml:{line_of(text, '      - email')}: idempotency.create_refund.key_fields[1]: 'email'" in message
    assert "semantic idempotency key" in message


def test_manifest_sha256_and_trust_tier_are_recorded() -> None:
    mandate = load_mandate(SEED)
    assert mandate.provenance.manifest_sha256 == "3721a7f7b443e157669ccc9ed27ccaf4daa2d67dc8367bc1481e2e2b8c4d6c6c"
    assert mandate.trust_tier("create_refund") == "pinned"
    # Recorded: both are part of what the mandate hash (and so every decision) commits to ...
    other = parse_mandate(SEED_TEXT.replace('trust_tier: "pinned"', 'trust_tier: "reviewed"'))
    assert other.mandate_hash != mandate.mandate_hash
    # ... and G6 writes the tier into the decision's result for the tool it judged.
    pinned = make_mandate({"provenance.pinned_manifests.create_refund.trust_tier": "pinned"})
    result = g6_provenance.check(refund_action(), context(None, pinned))  # type: ignore[arg-type]
    assert result.detail["trust_tier"] == "pinned"


def test_unknown_keys_are_still_errors() -> None:
    text = SEED_TEXT.replace('      trust_tier: "pinned"', '      trust_tier: "pinned"\n      trust_level: high')
    message = refused(text)
    assert f"seed.yaml:{line_of(text, 'trust_level')}: provenance.pinned_manifests.create_refund.trust_level: " \
           "unknown key" in message  # fmt: skip


def test_the_new_fields_leave_the_hash_of_a_mandate_that_does_not_use_them_alone() -> None:
    mandate = make_mandate()
    dumped = mandate.model_dump(mode="json")
    assert "task_binding" not in dumped and "task_signers" not in dumped
    assert "manifest_sha256" not in dumped["provenance"]
    assert all("trust_tier" not in pin for pin in dumped["provenance"]["pinned_manifests"].values())
    assert make_mandate({"task_binding": "required", "task_signers": {"h": "A" * 43 + "="}}).mandate_hash \
        != mandate.mandate_hash  # fmt: skip


def test_task_binding_required_needs_a_signer() -> None:
    with pytest.raises(MandateError, match="task_signers: task_binding is required"):
        make_mandate({"task_binding": "required"})


def test_a_task_signer_must_be_a_raw_ed25519_key() -> None:
    with pytest.raises(MandateError, match="32-byte Ed25519 public key"):
        make_mandate({"task_signers": {"harness": "c2hvcnQ="}})
