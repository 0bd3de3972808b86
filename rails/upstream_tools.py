"""Which upstream MCP tool answers each rail method in proxy mode (INTERLOCK_RAIL=mcp-upstream).

The default map is razorpay-mcp-server's own tool names and argument names, which the sandbox's MCP
front serves too (both of its profiles), plus one optional tool the real server does not have:

    rail method                  upstream tool                         arguments
    fetch_payment                fetch_payment                         payment_id
    fetch_refund                 fetch_refund                          refund_id
    create_refund                create_refund                         payment_id, amount, speed?, notes, receipt
    list_refunds_for_payment     fetch_multiple_refunds_for_payment    payment_id, count, skip
    create_instant_settlement    create_instant_settlement             amount, description?, notes
    list_instant_settlements     fetch_all_instant_settlements         count, skip
    fetch_instant_settlement     fetch_instant_settlement_with_id      settlement_id
    fetch_balance                fetch_balance (optional)              —

The balance tool is used only when the upstream lists it (the gate worker checks the manifest first):
razorpay-mcp-server has none, so against it every instant settlement is refused G2_BALANCE_UNREADABLE.

A different upstream may name the adapter's own reads differently: `ToolMap.parse` takes a JSON object
of overrides (INTERLOCK_UPSTREAM_TOOLS), e.g. {"fetch_balance": "get_settlement_balance"} or
{"fetch_balance": null} for "this upstream has no balance read". The four tools the agent calls keep
Interlock's names: mandate grants and G6 pins name them, and the agent sees the upstream's tool under it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from interlock.errors import ConfigError

VARIABLE = "INTERLOCK_UPSTREAM_TOOLS"
# Offered to the agent under these very names (ingress/proxy.py), so they cannot be renamed.
AGENT_FACING = ("fetch_payment", "fetch_refund", "create_refund", "create_settlement")


@dataclass(frozen=True)
class ToolMap:
    fetch_payment: str = "fetch_payment"
    fetch_refund: str = "fetch_refund"
    create_refund: str = "create_refund"
    list_refunds: str = "fetch_multiple_refunds_for_payment"
    create_settlement: str = "create_instant_settlement"
    list_settlements: str = "fetch_all_instant_settlements"
    fetch_settlement: str = "fetch_instant_settlement_with_id"
    fetch_balance: str | None = "fetch_balance"

    @classmethod
    def parse(cls, text: str | None) -> ToolMap:
        """The default map with the JSON object *text* applied; ConfigError names a bad key or value."""
        if text is None or not text.strip():
            return cls()
        try:
            changes: Any = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{VARIABLE} is not JSON: {exc}", variable=VARIABLE) from None
        if not isinstance(changes, dict):
            raise ConfigError(f"{VARIABLE} must be a JSON object of rail method to tool name", variable=VARIABLE)
        known = {f.name for f in fields(cls)}
        for key, value in changes.items():
            if key not in known:
                raise ConfigError(f"{VARIABLE}: unknown rail method {key!r}; known: {', '.join(sorted(known))}",
                                  variable=VARIABLE)  # fmt: skip
            if key in AGENT_FACING and value != getattr(cls(), key):
                raise ConfigError(f"{VARIABLE}: {key} cannot be renamed: the agent calls it by Interlock's name",
                                  variable=VARIABLE)  # fmt: skip
            if not (isinstance(value, str) and value) and not (value is None and key == "fetch_balance"):
                raise ConfigError(f"{VARIABLE}: {key} must name a tool", variable=VARIABLE)
        return replace(cls(), **changes)
