"""The harness's side of task binding (SPEC §10) for the scenario bench: a ticketing integration that signs the
ticket behind the user's task and attaches it to every call, and the mandate that requires it.

The key is the bench process's own, made fresh per run: the mandate each task-mode stack loads lists its public
half under `task_signers`. Seed payments carry an order and a customer derived from the scenario, so a ticket
naming "Asha Rao's payment" can be checked against the payment Interlock fetches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.scenario import Scenario
from interlock.clock import now_ms
from interlock.task import public_key_b64, sign_task

SIGNER = "bench_ticketing"
TICKET_TTL_MS = 3_600_000
_KEY = Ed25519PrivateKey.generate()


def binding_required() -> dict[str, Any]:
    """Mandate changes for the task-bound mode: a money call needs a task signed by this harness."""
    return {"task_binding": "required", "task_signers": {SIGNER: public_key_b64(_KEY)}}


def payment_details(payment_id: str, customer: str) -> dict[str, str]:
    """The order and customer ids a seed payment is created with (the sandbox serves both on the payment)."""
    return {"order_id": "order_" + re.sub(r"[^A-Za-z0-9]", "", payment_id)[:40],
            "customer_id": "cust_" + (re.sub(r"[^A-Za-z0-9]", "", customer)[:40] or "anon")}  # fmt: skip


def ticket_meta(scenario: Scenario, payments: Mapping[str, list[str]], customers: Mapping[str, str],
                task_id: str, *, merchant_id: str, agent_id: str) -> dict[str, Any] | None:  # fmt: skip
    """The signed `_meta` block for this run's ticket, or None when the scenario's task names no referent.
    The ticket names its audience (SPEC §10 v2): this stack's merchant and the one agent it drives."""
    if scenario.ticket is None:
        return None

    def first(name: str) -> str:
        return payments[name[1:]][0]

    grants: dict[str, dict[str, Any]] = {}
    for tool, ticket in scenario.ticket.items():
        grant: dict[str, Any] = {}
        if ticket.subjects is not None:
            grant["subjects"] = [pid for name in ticket.subjects for pid in payments[name[1:]]]
        if ticket.order is not None:
            grant["order_id"] = payment_details(first(ticket.order), customers[first(ticket.order)])["order_id"]
        if ticket.customer is not None:
            grant["customer_id"] = payment_details(first(ticket.customer), customers[first(ticket.customer)])[
                "customer_id"]  # fmt: skip
        if ticket.max_amount_minor is not None:
            grant["max_amount_minor"] = ticket.max_amount_minor
        grants[tool] = grant
    # The ticket's own words travel with it: G5, when a mandate turns it on, compares the call with them.
    task = {"task_id": task_id, "expires_at": now_ms() + TICKET_TTL_MS, "grants": grants, "purpose": scenario.task,
            "audience": {"merchant_id": merchant_id, "agent_ids": [agent_id]}}  # fmt: skip
    return sign_task(task, _KEY, SIGNER)
