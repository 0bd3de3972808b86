"""A real MCP client for Interlock's HTTP ingress, and a small client for the sandbox's control
surface — what the demo, the scripted benchmark agent and the chaos matrix drive the stack with."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from interlock.sik import carries_stamp

STACK_FILE = "stack.json"


@dataclass(frozen=True)
class StackInfo:
    """What `interlock up` writes to <data>/stack.json for clients on this machine."""

    mcp_url: str
    token_file: str
    agent_id: str
    sandbox_url: str | None
    rail_key_id: str | None
    rail_key_secret: str | None
    ledger: str
    redis_url: str
    shard: str | None = None  # `interlock up --shards N`: the shard this agent's merchant is assigned to
    webhook_url: str | None = None  # where the rail delivers its webhooks (SPEC §17), when the stack receives them

    @classmethod
    def load(cls, data_dir: Path, shard: str | None = None) -> StackInfo:
        path = Path(data_dir) / (STACK_FILE if shard is None else stack_file(shard))
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise SystemExit(f"{path} not found: start the stack first with `interlock up --data {data_dir}`") from None

    def token(self) -> str:
        return Path(self.token_file).read_text(encoding="utf-8").strip()


def stack_file(shard: str) -> str:
    return f"stack-{shard}.json"


def mcp_client(url: str, token: str, *, timeout_s: float = 60) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=timeout_s)


def structured(result: Any) -> dict[str, Any]:
    """The structured content of a tool result (SPEC §10), whether or not it is an error."""
    content = getattr(result, "structured_content", None)
    if isinstance(content, dict):
        return content
    for block in getattr(result, "content", []) or []:
        text = getattr(block, "text", None)
        if text:
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            if isinstance(parsed, dict):
                return parsed
    return {}


class SandboxControl:
    """The sandbox rail's /__sandbox control surface (sandbox-only; not part of Razorpay's API)."""

    def __init__(self, url: str, key_id: str, key_secret: str) -> None:
        self.http = httpx.Client(base_url=url, auth=(key_id, key_secret), timeout=10.0)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        response.raise_for_status()
        return response.json()

    def set_faults(self, faults: list[dict[str, Any]], seed: int | None = None) -> Any:
        body: dict[str, Any] = {"faults": faults}
        if seed is not None:
            body["seed"] = seed
        return self._call("POST", "/__sandbox/faults", body)

    def faults(self) -> dict[str, Any]:
        state: dict[str, Any] = self._call("GET", "/__sandbox/faults")
        return state

    def add_payment(self, payment_id: str, amount: int, **extra: Any) -> Any:
        return self._call("POST", "/__sandbox/payments", {"id": payment_id, "amount": amount, "currency": "INR",
                                                           **extra})  # fmt: skip

    def set_balance(self, amount: int) -> Any:
        return self._call("POST", "/__sandbox/balance", {"amount": amount, "currency": "INR"})

    def add_fund_account(
        self, fund_account_id: str | None = None, *, account_type: str = "bank_account", active: bool = True,
        **extra: Any,
    ) -> Any:  # fmt: skip
        """A RazorpayX fund account and its contact (`contact`/`contact_id`, `bank_account`/`vpa` in *extra*)."""
        body: dict[str, Any] = {"account_type": account_type, "active": active, **extra}
        if fund_account_id is not None:
            body["id"] = fund_account_id
        return self._call("POST", "/__sandbox/fund_accounts", body)

    def set_banking_balance(self, amount: int) -> Any:
        """The RazorpayX business account's balance payouts are paid from (apart from set_balance's)."""
        return self._call("POST", "/__sandbox/banking_balance", {"amount": amount, "currency": "INR"})

    def entities(self) -> list[dict[str, Any]]:
        entities: list[dict[str, Any]] = self._call("GET", "/__sandbox/journal")["entities"]
        return entities

    def count_stamped(self, sik: str) -> int:
        return sum(carries_stamp(record["entity"], sik) for record in self.entities())

    def close(self) -> None:
        self.http.close()
