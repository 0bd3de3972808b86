"""Interlock's tool catalogue: integer amounts, strict schemas, annotations, and definition hashes for G6."""

from __future__ import annotations

from typing import Any

from interlock.canonical import canonical_hash
from interlock.tools import MONEY_TOOLS, READ_TOOLS, TOOLS, current_pins, tool_definition_hash


def test_catalogue_names_and_money_flags() -> None:
    assert set(TOOLS) == {"fetch_payment", "fetch_refund", "create_refund", "create_instant_settlement",
                          "create_payout", "interlock_status"}
    assert MONEY_TOOLS == {"create_refund", "create_instant_settlement", "create_payout"}
    assert READ_TOOLS == set(TOOLS) - MONEY_TOOLS
    assert all(TOOLS[name].moves_money for name in MONEY_TOOLS)


def test_amounts_are_declared_as_positive_integers() -> None:
    for name in MONEY_TOOLS:
        amount = TOOLS[name].input_schema["properties"]["amount"]
        assert amount["type"] == "integer" and amount["minimum"] == 1
        assert "paise" in TOOLS[name].description


def test_input_schemas_refuse_unknown_arguments_and_bound_ids_and_notes() -> None:
    for spec in TOOLS.values():
        assert spec.input_schema["additionalProperties"] is False
    assert TOOLS["create_refund"].input_schema["required"] == ["payment_id"]
    assert TOOLS["create_refund"].input_schema["properties"]["payment_id"]["pattern"] == "^[A-Za-z0-9_]{1,64}$"
    assert TOOLS["create_refund"].input_schema["properties"]["speed"]["enum"] == ["normal", "optimum"]
    payout = TOOLS["create_payout"].input_schema
    assert payout["required"] == ["fund_account_id", "amount", "currency", "mode", "purpose"]
    assert payout["properties"]["fund_account_id"]["pattern"] == "^fa_[A-Za-z0-9]{14}$"
    # queue_if_low_balance and the account are the mandate's, never the agent's (ADR 0028).
    assert "queue_if_low_balance" not in payout["properties"] and "account_number" not in payout["properties"]
    for name in MONEY_TOOLS:
        # 15 on the rail, three of which are Interlock's own (interlock.notes).
        assert TOOLS[name].input_schema["properties"]["notes"]["maxProperties"] == 12
        assert TOOLS[name].input_schema["properties"]["interlock_distinct_reason"]["maxLength"] == 200


def test_annotations_tell_reads_from_money() -> None:
    for name in READ_TOOLS:
        hints = TOOLS[name].annotations
        assert hints["readOnlyHint"] is True and hints["destructiveHint"] is False
    for name in MONEY_TOOLS:
        hints = TOOLS[name].annotations
        assert hints["readOnlyHint"] is False and hints["destructiveHint"] is True
        assert hints["idempotentHint"] is True and hints["openWorldHint"] is True
        assert "safe" in TOOLS[name].description  # the agent is told retrying is safe


def test_money_tools_declare_the_structured_result() -> None:
    for name in (*MONEY_TOOLS, "interlock_status"):
        schema = TOOLS[name].output_schema
        assert set(schema["required"]) == {"state", "sik", "intent", "rail_entity_id", "reason_code",
                                           "caller_action", "replayed"}
        assert schema["properties"]["intent"]["properties"]["amount_minor"]["type"] == "integer"
        assert "RETRY_SAME_CALL" in schema["properties"]["caller_action"]["enum"]


def test_definition_hash_is_canonical_sha256_of_name_description_schema() -> None:
    spec = TOOLS["create_refund"]
    expected = canonical_hash({"name": spec.name, "description": spec.description, "input_schema": spec.input_schema})
    assert spec.definition_hash == expected == current_pins()["create_refund"]


def test_definition_hash_changes_when_description_changes_by_one_character() -> None:
    spec = TOOLS["create_refund"]
    poisoned = spec.description[:-1] + ("!" if spec.description[-1] != "!" else "?")
    assert tool_definition_hash(spec.name, poisoned, spec.input_schema) != spec.definition_hash


def test_definition_hash_changes_when_the_schema_changes() -> None:
    spec = TOOLS["create_refund"]
    schema: dict[str, Any] = spec.input_schema
    schema["properties"]["amount"]["minimum"] = 0
    assert tool_definition_hash(spec.name, spec.description, schema) != spec.definition_hash


def test_catalogue_cannot_be_mutated_through_its_schemas() -> None:
    before = current_pins()
    TOOLS["create_refund"].input_schema["properties"].clear()
    assert current_pins() == before


def test_mcp_listing_uses_mcp_field_names() -> None:
    listed = TOOLS["fetch_payment"].to_mcp()
    assert {"name", "description", "inputSchema", "outputSchema", "annotations"} <= set(listed)
