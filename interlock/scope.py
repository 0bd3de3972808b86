"""The scope check (G1) as a pure function, shared by the gate ladder and by the ingress for read-only
tools, which need only G1 (SPEC §7)."""

from __future__ import annotations

from interlock.mandate import Mandate
from interlock.verdicts import GateResult, allow, block


def check_scope(mandate: Mandate | None, tool: str, agent_id: str, merchant_id: str, now_ms: int) -> GateResult:
    if mandate is None:
        return block("G1_NO_MANDATE", agent_id=agent_id)
    if mandate.agent_id != agent_id:
        return block("G1_AGENT_MISMATCH", agent_id=agent_id, mandate_agent_id=mandate.agent_id)
    if mandate.merchant_id != merchant_id:
        return block("G1_MERCHANT_MISMATCH", merchant_id=merchant_id, mandate_merchant_id=mandate.merchant_id)
    if now_ms < mandate.issued_at:
        return block("G1_MANDATE_NOT_YET_VALID", issued_at=mandate.issued_at, now_ms=now_ms)
    if now_ms >= mandate.expires_at:
        return block("G1_MANDATE_EXPIRED", expires_at=mandate.expires_at, now_ms=now_ms)
    if mandate.grant(tool) is None:
        return block("G1_TOOL_NOT_GRANTED", tool=tool, granted=sorted(mandate.scope.grants))
    return allow("G1_IN_SCOPE", mandate_id=mandate.mandate_id)
