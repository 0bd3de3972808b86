"""The agent's tools in each mode. Direct: the sandbox rail's REST API (a fresh idempotency key per
attempt, as naive harnesses mint one) or, in proxy scenarios, the upstream MCP server itself. Gated:
a real MCP client to Interlock's running ingress."""

from __future__ import annotations

import asyncio
import logging
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, cast

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from bench.agent import Answer
from deploy.agent_client import structured
from interlock.errors import InterlockError
from interlock.tools import TOOLS as INTERLOCK_TOOLS
from rails.razorpay import RailError, RazorpayClient

logger = logging.getLogger(__name__)

BEFORE_CALL_KILLS = ("rail.before_wal", "rail.after_wal_before_call")


@dataclass(frozen=True)
class PayoutAccount:
    """What the merchant's own integration sends with a direct payout: its RazorpayX account and queueing rule."""

    account_number: str
    queue_if_low_balance: bool = False


class DirectRestTools:
    """Razorpay MCP tool names executed straight against the rail with the REST client; no Interlock.

    *lost_answer* emulates the gated run's rail-worker kill for the caller that has no ledger: the
    first money call is dropped before it is sent, or its answer is lost after the rail applied it.
    """

    def __init__(self, url: str, key_id: str, key_secret: str, *, timeout_ms: int,
                 kill: str | None = None, payouts: PayoutAccount | None = None) -> None:  # fmt: skip
        self.client = RazorpayClient(url, key_id, key_secret, timeout_ms=timeout_ms)
        self.kill = kill
        self.payouts = payouts or PayoutAccount("")

    async def call(self, tool: str, arguments: dict[str, Any]) -> Answer:
        return await asyncio.to_thread(self._call, tool, arguments)

    async def description(self, tool: str) -> str | None:
        definition = INTERLOCK_TOOLS.get(tool)
        return None if definition is None else definition.description

    def _call(self, tool: str, args: dict[str, Any]) -> Answer:
        kill, self.kill = self.kill, None
        if kill in BEFORE_CALL_KILLS:
            return Answer(None, f"caller died before the call ({kill})")
        try:
            if tool == "create_refund":
                entity: Any = self.client.create_refund(
                    args["payment_id"], args.get("amount"), speed=args.get("speed"), notes=args.get("notes"),
                    receipt=None, idempotency_key=uuid.uuid4().hex,
                )  # fmt: skip
            elif tool == "create_payout":
                # A fresh key per attempt, as a harness minting one per request does; reference_id likewise.
                key = uuid.uuid4().hex
                entity = self.client.create_payout(
                    account_number=self.payouts.account_number, fund_account_id=args["fund_account_id"],
                    amount=args["amount"], currency=args.get("currency", "INR"), mode=args.get("mode", "IMPS"),
                    purpose=args.get("purpose", "payout"), queue_if_low_balance=self.payouts.queue_if_low_balance,
                    reference_id=key, narration=args.get("narration"), notes=args.get("notes"), idempotency_key=key,
                )  # fmt: skip
            elif tool == "create_instant_settlement":
                entity = self.client.create_instant_settlement(
                    args.get("amount"), settle_full_balance=bool(args.get("settle_full_balance")),
                    description=args.get("description"), notes=args.get("notes"),
                )  # fmt: skip
            else:
                self.client.fetch_payment(args["payment_id"])
                return Answer("READ")
        except RailError as exc:
            return Answer(None, f"{exc.kind} {exc.http_status}")
        except InterlockError as exc:
            return Answer(None, f"invalid: {exc}")
        if kill is not None:
            return Answer(None, f"caller died after the call, before recording it ({kill})")
        return Answer("APPLIED", entity_id=entity.id)

    async def aclose(self) -> None:
        self.client.close()


class McpTools:
    """A real MCP client: to Interlock's ingress (gated, with the agent's bearer token) or to the upstream
    MCP server directly (direct mode of proxy scenarios). A session that failed is replaced."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float, meta: dict[str, Any] | None = None) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        # What the harness (never the model) attaches to every call's `_meta`: the signed task (SPEC §10).
        self.meta = meta
        self._stack: AsyncExitStack | None = None
        self._client: Client | None = None

    async def open(self) -> None:
        """Open the session in the caller's task: anyio requires it to be closed in the task that opened it,
        and parallel steps would otherwise open it inside one of their own tasks."""
        try:
            await self._session()
        except Exception:  # noqa: BLE001 - unreachable now: the agent's first call reports it and retries
            await self._reset()

    async def _session(self) -> Client:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            http = httpx2.AsyncClient(headers=headers, timeout=self.timeout_s)
            stack = AsyncExitStack()
            client = Client(streamable_http_client(self.url, http_client=http), read_timeout_seconds=self.timeout_s)
            self._client = await stack.enter_async_context(client)
            self._stack = stack
        return self._client

    async def _reset(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            try:
                await stack.aclose()
            except Exception:  # noqa: BLE001 - a broken session may fail to close; it is dropped either way
                logger.debug("closing a failed MCP session raised", exc_info=True)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Answer:
        try:
            client = await self._session()
            result = await client.call_tool(tool, arguments, meta=cast("RequestParamsMeta | None", self.meta))
        except Exception as exc:  # noqa: BLE001 - a timeout or lost session is an error the agent retries
            # The agent sees the exception's type only (as it always has); the log keeps what it said.
            logger.warning("MCP call %s failed: %s: %s", tool, type(exc).__name__, exc)
            await self._reset()
            return Answer(None, f"{type(exc).__name__}")
        content = structured(result)
        said = {"caller_action": content.get("caller_action"), "reason_code": content.get("reason_code"),
                "sik": content.get("sik")}  # fmt: skip
        if getattr(result, "is_error", False):
            return Answer(content.get("state"), f"isError {content.get('reason_code') or _text(result)[:80]}", **said)
        if "state" in content:
            return Answer(str(content["state"]), entity_id=content.get("rail_entity_id"), **said)
        # The upstream's own result (direct proxy mode): an entity means the rail applied it.
        return Answer("APPLIED" if content.get("id") else "READ", entity_id=content.get("id"))

    async def description(self, tool: str) -> str | None:
        try:
            client = await self._session()
            listed = await client.list_tools()
        except Exception:  # noqa: BLE001 - no listing: the agent calls with the task's own arguments
            await self._reset()
            return None
        for item in listed.tools:
            if item.name == tool:
                return item.description
        return None

    async def aclose(self) -> None:
        await self._reset()


def _text(result: Any) -> str:
    return " ".join(getattr(b, "text", "") or "" for b in getattr(result, "content", []) or [])
