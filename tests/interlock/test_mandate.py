"""The mandate loader: strict schema, errors that name the field and line, a stable mandate_hash."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from interlock.config import load_settings
from interlock.errors import MandateError
from interlock.mandate import Mandate, MandateStore, load_mandate, load_mandates_from_settings, parse_mandate

VALID = """\
v: 1
mandate_id: mnd_support_tier1
merchant_id: acc_DEMO000001
agent_id: agent_support_bot
issued_at: 1700000000000
expires_at: 2000000000000
purpose: "Refund duplicate customer charges up to Rs 5,000"
scope:
  grants:
    fetch_payment: {reversibility: reversible}
    create_refund:
      reversibility: irreversible
      value: {min_amount_minor: 100, max_amount_minor: 500000, currencies: [INR]}
    create_instant_settlement:
      reversibility: irreversible
      value:
        min_amount_minor: 200
        max_amount_minor: 1000000
        currencies: [INR]
limits:
  windows:
    - {window_ms: 86400000, max_calls: 40, max_amount_minor: 2000000, currency: INR}
  fee_budgets:
    INR: {window_ms: 86400000, max_fee_minor: 20000}
idempotency:
  create_instant_settlement: {window_ms: 86400000}
approval: {approvers: [ops_lead@example.com], hold_above_minor: 300000, hold_expiry_ms: 86400000}
provenance:
  server_id: interlock-rest
  pinned_manifests:
    create_refund: {sha256: "%s"}
""" % ("ab" * 32)


def line_of(text: str, snippet: str) -> int:
    """1-based number of the first line of *text* containing *snippet*."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if snippet in line)


def refused(text: str) -> str:
    with pytest.raises(MandateError) as info:
        parse_mandate(text, source="m.yaml")
    return str(info.value)


def test_valid_mandate_loads_with_its_grants_and_windows() -> None:
    m = parse_mandate(VALID)
    assert m.agent_id == "agent_support_bot"
    grant = m.grant("create_refund")
    assert grant is not None and grant.value is not None and grant.value.max_amount_minor == 500000
    assert m.grant("fetch_refund") is None
    assert m.window_ms("create_instant_settlement") == 86400000
    assert m.window_ms("create_refund") is None
    assert m.pin("create_refund") == "ab" * 32
    assert m.is_active(1700000000000) and not m.is_active(2000000000000)


def test_optional_sections_default_to_empty() -> None:
    text = "\n".join(
        [
            "v: 1",
            "mandate_id: m1",
            "merchant_id: acc_1",
            "agent_id: a1",
            "issued_at: 1",
            "expires_at: 2",
            "purpose: read only",
            "scope: {grants: {fetch_payment: {reversibility: reversible}}}",
        ]
    )
    m = parse_mandate(text)
    assert m.limits.windows == [] and m.limits.fee_budgets == {}
    assert m.approval.approvers == [] and m.approval.hold_above_minor is None
    assert m.provenance.pinned_manifests == {}


@pytest.mark.parametrize(
    ("old", "new", "field", "anchor"),
    [
        ("purpose:", "colour: blue\npurpose:", "colour", "colour: blue"),
        ("server_id: interlock-rest", "server_id: interlock-rest\n  trust: high", "provenance.trust", "trust: high"),
        ("max_amount_minor: 1000000", "max_amount_minor: 1000000.0", "max_amount_minor", "1000000.0"),
        ("max_amount_minor: 1000000", "max_amount_minor: true", "max_amount_minor", "max_amount_minor: true"),
        ("max_amount_minor: 1000000", 'max_amount_minor: "1000000"', "max_amount_minor", '"1000000"'),
        ("min_amount_minor: 200", "min_amount_minor: 2000000", "min_amount_minor", "min_amount_minor: 2000000"),
        ("        currencies: [INR]", "        currencies: [inr]", "currencies[0]", "currencies: [inr]"),
        ("expires_at: 2000000000000", "expires_at: 1600000000000", "expires_at", "expires_at:"),
        ('{sha256: "' + "ab" * 32 + '"}', '{sha256: "' + "AB" * 32 + '"}', "create_refund.sha256", "sha256"),
        ("    fetch_payment:", "    refund_everything: {reversibility: reversible}\n    fetch_payment:",
         "scope.grants.refund_everything", "refund_everything"),
        ("idempotency:\n  create_instant_settlement: {window_ms: 86400000}",
         "idempotency:\n  create_refund: {window_ms: 86400000}", "idempotency.create_refund.window_ms",
         "create_refund: {window_ms"),
    ],
    ids=[
        "unknown-top-level-key",
        "unknown-nested-key",
        "float-amount",
        "bool-amount",
        "string-amount",
        "min-above-max",
        "bad-currency",
        "expires-before-issued",
        "bad-pin-hex",
        "unknown-tool",
        "refund-with-window",
    ],
)
def test_malformed_mandate_is_refused_naming_field_and_line(old: str, new: str, field: str, anchor: str) -> None:
    assert old in VALID
    text = VALID.replace(old, new, 1)
    message = refused(text)
    assert field in message
    assert f"m.yaml:{line_of(text, anchor)}:" in message


def test_float_amount_message_says_integer_and_shows_the_value() -> None:
    message = refused(VALID.replace("max_amount_minor: 500000", "max_amount_minor: 100.0"))
    assert "scope.grants.create_refund.value.max_amount_minor" in message
    assert "integer" in message and "100.0" in message


def test_missing_field_is_named_with_the_line_of_its_parent() -> None:
    text = VALID.replace("        min_amount_minor: 200\n", "")
    message = refused(text)
    assert "scope.grants.create_instant_settlement.value.min_amount_minor: required field is missing" in message
    value_line = text.splitlines().index("      value:") + 1  # the settlement's block-style value
    assert f"m.yaml:{value_line}:" in message


def test_missing_top_level_field_is_refused() -> None:
    message = refused(VALID.replace("agent_id: agent_support_bot\n", ""))
    assert "agent_id: required field is missing" in message


def test_settlement_granted_without_idempotency_window_is_refused() -> None:
    text = VALID.replace("idempotency:\n  create_instant_settlement: {window_ms: 86400000}\n", "")
    message = refused(text)
    assert "idempotency.create_instant_settlement.window_ms" in message
    assert "must be set" in message
    # The YAML has no idempotency section, so the error points at the grant that needs one.
    assert f"m.yaml:{line_of(text, '    create_instant_settlement:')}:" in message


def test_money_tool_without_value_is_refused() -> None:
    text = VALID.replace(
        "      value: {min_amount_minor: 100, max_amount_minor: 500000, currencies: [INR]}\n", ""
    )
    message = refused(text)
    assert "scope.grants.create_refund.value" in message
    assert f"m.yaml:{line_of(text, '    create_refund:')}:" in message


def test_version_other_than_one_is_refused_even_as_true_or_float() -> None:
    for bad in ("2", "true", "1.0"):
        assert "m.yaml:1: v:" in refused(VALID.replace("v: 1", f"v: {bad}", 1))


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = VALID.replace("max_calls: 40", "max_calls: 40.0").replace("purpose:", "colour: blue\npurpose:")
    message = refused(text)
    assert "2 problems" in message
    assert "limits.windows[0].max_calls" in message and "colour" in message


def test_duplicate_key_is_refused_with_both_lines() -> None:
    text = VALID.replace("agent_id: agent_support_bot", "agent_id: agent_support_bot\nagent_id: agent_other")
    message = refused(text)
    assert "duplicate key 'agent_id'" in message
    assert f"m.yaml:{line_of(text, 'agent_other')}" in message


def test_hold_threshold_without_approvers_is_refused() -> None:
    message = refused(VALID.replace("approvers: [ops_lead@example.com]", "approvers: []"))
    assert "approval.approvers" in message


def test_not_yaml_and_not_a_mapping_are_refused() -> None:
    assert "not valid YAML" in refused("v: [1\n")
    assert "mapping" in refused("- v\n")


def test_mandate_hash_ignores_formatting_key_order_and_comments() -> None:
    data = yaml.safe_load(VALID)
    reordered = {key: data[key] for key in reversed(list(data))}
    reformatted = "# a comment\n" + yaml.safe_dump(reordered, default_flow_style=False, sort_keys=True)
    assert parse_mandate(reformatted).mandate_hash == parse_mandate(VALID).mandate_hash


def test_mandate_hash_is_the_sha256_of_the_canonical_validated_mandate() -> None:
    from interlock.canonical import canonical_hash

    m = parse_mandate(VALID)
    assert m.mandate_hash == canonical_hash(m.model_dump(mode="json"))
    assert len(m.mandate_hash) == 64


def test_explicit_defaults_hash_like_absent_sections() -> None:
    base = VALID.split("approval:")[0]
    explicit = base + "approval: {approvers: [], hold_expiry_ms: 86400000}\n"
    assert parse_mandate(base).mandate_hash == parse_mandate(explicit).mandate_hash


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("max_amount_minor: 500000", "max_amount_minor: 500001"),
        ("max_calls: 40", "max_calls: 41"),
        ("ops_lead@example.com", "ops_lead2@example.com"),
        ("Rs 5,000", "Rs 5,001"),
        ("expires_at: 2000000000000", "expires_at: 2000000000001"),
    ],
)
def test_mandate_hash_changes_with_any_value(old: str, new: str) -> None:
    assert parse_mandate(VALID.replace(old, new, 1)).mandate_hash != parse_mandate(VALID).mandate_hash


def test_mandate_built_in_code_obeys_the_same_rules() -> None:
    data = yaml.safe_load(VALID)
    del data["idempotency"]
    with pytest.raises(ValueError, match="window_ms must be set"):
        Mandate.model_validate(data)


def test_load_mandate_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MandateError, match="does not exist"):
        load_mandate(tmp_path / "nope.yaml")


def test_example_mandate_in_deploy_loads_and_pins_current_tools() -> None:
    from interlock.tools import current_pins

    root = Path(__file__).resolve().parents[2]
    m = load_mandate(root / "deploy" / "mandate.example.yaml")
    assert (m.merchant_id, m.agent_id) == ("acc_DEMO000001", "agent_demo")
    assert {"create_refund", "create_instant_settlement"} <= set(m.scope.grants)
    # A description edit in interlock/tools.py must be re-pinned here (and reviewed).
    assert {tool: pin.sha256 for tool, pin in m.provenance.pinned_manifests.items()} == current_pins()
    manifest = yaml.safe_load((root / "deploy" / "pinned-manifest.example.yaml").read_text())
    assert {t: p["sha256"] for t, p in manifest["provenance"]["pinned_manifests"].items()} == current_pins()


# -- several mandates from settings ----------------------------------------------------------------------------


def _write(path: Path, agent_id: str) -> Path:
    path.write_text(VALID.replace("agent_support_bot", agent_id))
    return path


def test_mandate_dir_loads_one_mandate_per_agent(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", "agent_a")
    _write(tmp_path / "b.yaml", "agent_b")
    (tmp_path / "a.yaml.sig").write_text("not a mandate")
    mandates = load_mandates_from_settings(load_settings(mandate_dir=tmp_path))
    assert sorted(mandates) == ["agent_a", "agent_b"]
    store = MandateStore.from_settings(load_settings(mandate_dir=tmp_path))
    assert store.require("agent_a").agent_id == "agent_a" and store.get("agent_c") is None
    with pytest.raises(MandateError, match="agent_c"):
        store.require("agent_c")


def test_two_mandates_for_one_agent_are_refused(tmp_path: Path) -> None:
    _write(tmp_path / "a.yaml", "agent_a")
    _write(tmp_path / "b.yaml", "agent_a")
    with pytest.raises(MandateError, match="two mandates for agent_id 'agent_a'"):
        load_mandates_from_settings(load_settings(mandate_dir=tmp_path))


def test_single_mandate_file_from_settings(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.yaml", "agent_a")
    assert list(load_mandates_from_settings(load_settings(mandate=path))) == ["agent_a"]


def test_missing_configured_paths_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(MandateError, match=f"INTERLOCK_MANDATE={tmp_path / 'gone.yaml'}"):
        load_mandates_from_settings(load_settings(mandate=tmp_path / "gone.yaml"))
    with pytest.raises(MandateError, match="INTERLOCK_MANDATE_DIR="):
        load_mandates_from_settings(load_settings(mandate_dir=tmp_path / "gone"))
    with pytest.raises(MandateError, match="INTERLOCK_MANDATE"):
        load_mandates_from_settings(load_settings(mandate=None, mandate_dir=None))
