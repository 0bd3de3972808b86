"""The mandate (SPEC §11): the human-approved YAML that is the single source of runtime permission.

Split by concern — interlock.mandate_model (the model and its cross-field rules), interlock.mandate_load
(strict YAML with file:line errors, the per-agent store) and interlock.mandate_sign (Ed25519 signatures) —
and re-exported here, which is where the rest of the code imports them from.
"""

from __future__ import annotations

from interlock.mandate_load import (
    MandateStore,
    load_mandate,
    load_mandates_from_settings,
    parse_mandate,
    sign_mandate,
    validate_mandate,
    verify_mandate_signature,
)
from interlock.mandate_model import (
    REFUND_TOOL,
    SIK_FIELDS,
    Approval,
    FeeBudget,
    FreeText,
    Grant,
    IdempotencyRule,
    Limits,
    Mandate,
    Pin,
    Provenance,
    Scope,
    TaskBinding,
    ValueLimit,
    Window,
)
from interlock.mandate_sign import (
    SIGNATURE_SUFFIX,
    SIGNING_CONTEXT,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    signature_path,
    signature_problem,
)

__all__ = [
    "REFUND_TOOL", "SIGNATURE_SUFFIX", "SIGNING_CONTEXT", "SIK_FIELDS", "Approval", "FeeBudget", "FreeText", "Grant",
    "IdempotencyRule", "Limits", "Mandate", "MandateStore", "Pin", "Provenance", "Scope", "TaskBinding",
    "ValueLimit", "Window", "generate_keypair", "key_id", "load_mandate", "load_mandates_from_settings",
    "load_private_key", "load_public_key", "parse_mandate", "sign_mandate", "signature_path", "signature_problem",
    "validate_mandate", "verify_mandate_signature",
]  # fmt: skip
