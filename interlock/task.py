"""Task binding (SPEC §10 "interlock/task"): what *this* call is about, signed by the application harness.

The mandate says what an agent may ever do; a task says what the person asked for now — which tools, which
payment, order or customer, and how much in total, until when. The harness (the ticket system, the agent
host — never the model) puts the task in the tool call's `_meta["interlock/task"]` and a detached Ed25519
signature in `_meta["interlock/task_sig"]`:

    {"signer": "<signer_id>", "sig": base64(Ed25519(b"interlock-task-v2\\n" + RFC 8785 JSON of the task))}

by a key the mandate lists under `task_signers` (base64 of the raw 32-byte public key). The signature covers
the task exactly as received (its canonical JSON), so any language with an RFC 8785 encoder can produce it;
`task_digest` is the sha256 hex of those same canonical bytes and is what the ledger and the audit log record.
A v2 task names its audience inside the signed object — `audience: {merchant_id, agent_ids}` — so one merchant's
ticket cannot be presented by another merchant's agent (issue 25, item 5; ADR 0013). A v1 task (no audience) is
refused with a message saying to re-sign it as v2.
Verification is a value, never an exception: a VerifiedTask, or a TaskProblem with a stable reason code.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from interlock.canonical import canonical_json, sha256_hex
from interlock.tools import TOOLS

TASK_META_KEY = "interlock/task"
TASK_SIG_META_KEY = "interlock/task_sig"
# Domain separation (a task signature is never a mandate's) and the wire version: v2 carries the audience.
TASK_SIGNING_CONTEXT = b"interlock-task-v2\n"

# Reason codes of a task that cannot be trusted (G1); each is BLOCK and nothing reaches the rail.
TASK_MALFORMED = "G1_TASK_MALFORMED"
TASK_UNKNOWN_SIGNER = "G1_TASK_UNKNOWN_SIGNER"
TASK_BAD_SIGNATURE = "G1_TASK_BAD_SIGNATURE"
TASK_EXPIRED = "G1_TASK_EXPIRED"
TASK_REQUIRED = "G1_TASK_REQUIRED"
TOOL_NOT_IN_TASK = "G1_TOOL_NOT_IN_TASK"
# A task whose audience is not this call's merchant and agent — or that names none (v1): at the gate and at admit.
TASK_WRONG_AUDIENCE = "G1_TASK_WRONG_AUDIENCE"
V1_TASK_ERROR = ("a v1 task names no audience, so any merchant's agent could present it: re-sign it as v2, with "
                 "audience {merchant_id, agent_ids} inside the signed object and the signed bytes starting "
                 "b\"interlock-task-v2\\n\" (interlock task sign --merchant M --agent A)")  # fmt: skip
# ... and of a call outside the task's grant (G2), re-asserted at admit for the ceiling.
SUBJECT_NOT_IN_TASK = "G2_SUBJECT_NOT_IN_TASK"
ORDER_MISMATCH = "G2_ORDER_MISMATCH"
CUSTOMER_MISMATCH = "G2_CUSTOMER_MISMATCH"
EXCEEDS_TASK_CEILING = "G2_EXCEEDS_TASK_CEILING"

_RAIL_ID = r"^[A-Za-z0-9_]{1,64}$"
RailId = Annotated[str, Field(pattern=_RAIL_ID)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TaskGrant(_Strict):
    """What the task allows one tool to do; every field narrows, none widens the mandate."""

    subjects: list[RailId] | None = Field(default=None, min_length=1)
    order_id: RailId | None = None
    customer_id: RailId | None = None
    max_amount_minor: Annotated[StrictInt, Field(ge=1)] | None = None


class TaskAudience(_Strict):
    """Who may present the task: exactly one merchant (so all its money is in one shard's ledger, where its
    ceiling is counted) and the agents of that merchant it is for."""

    merchant_id: RailId
    agent_ids: list[RailId] = Field(min_length=1, max_length=64)

    @field_validator("agent_ids")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists an agent twice")
        return value


class Task(_Strict):
    task_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    expires_at: Annotated[StrictInt, Field(ge=0)]
    # None only in a v1 task, which verify_task refuses before it trusts anything else in it.
    audience: TaskAudience | None = None
    grants: dict[str, TaskGrant] = Field(min_length=1)
    # What the person asked for, in words: G5 compares the call with it too when the mandate turns G5 on.
    purpose: str | None = Field(default=None, min_length=1, max_length=500)


@dataclass(frozen=True, slots=True)
class VerifiedTask:
    """A task whose signature verified against a mandate's task_signers and that had not expired."""

    task: Task
    digest: str
    signer: str

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def audience(self) -> TaskAudience:
        assert self.task.audience is not None  # verify_task refuses a task without one
        return self.task.audience

    def grant(self, tool: str) -> TaskGrant | None:
        return self.task.grants.get(tool)

    def audience_problem(self, merchant_id: str, agent_id: str) -> TaskProblem | None:
        """Why *agent_id* of *merchant_id* may not present this task, or None when the audience names both."""
        return audience_problem(self.audience.merchant_id, self.audience.agent_ids, merchant_id, agent_id,
                                task_id=self.task_id, signer=self.signer)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TaskProblem:
    reason_code: str
    detail: dict[str, Any] = field(default_factory=dict)


def audience_problem(
    audience_merchant: str | None, audience_agents: Sequence[str] | None, merchant_id: str, agent_id: str, *,
    task_id: str, signer: str | None,
) -> TaskProblem | None:
    """The audience rule (SPEC §10 v2), shared by the gate and the admitting transaction."""
    if audience_merchant is None or not audience_agents:
        return TaskProblem(TASK_WRONG_AUDIENCE, {"error": V1_TASK_ERROR, "task_id": task_id, "signer": signer})
    if audience_merchant != merchant_id or agent_id not in audience_agents:
        return TaskProblem(TASK_WRONG_AUDIENCE, {"task_id": task_id, "signer": signer, "merchant_id": merchant_id,
                                                 "agent_id": agent_id, "audience_merchant_id": audience_merchant,
                                                 "audience_agent_ids": list(audience_agents)})  # fmt: skip
    return None


def signing_bytes(task: Mapping[str, Any]) -> bytes:
    """The exact bytes a task signature covers: the context line, then the task's RFC 8785 canonical JSON."""
    return TASK_SIGNING_CONTEXT + canonical_json(dict(task))


def task_digest(task: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json(dict(task)))


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The `task_signers` entry for *key*: base64 of the raw 32-byte public key."""
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def sign_task(task: Mapping[str, Any], key: Ed25519PrivateKey, signer: str) -> dict[str, Any]:
    """The `_meta` block a harness attaches to a tool call: the task and its signature (SPEC §10)."""
    signature = key.sign(signing_bytes(task))
    return {TASK_META_KEY: dict(task),
            TASK_SIG_META_KEY: {"signer": signer, "sig": base64.b64encode(signature).decode("ascii")}}  # fmt: skip


def verify_task(
    raw_task: Any, raw_sig: Any, signers: Mapping[str, str], now_ms: int
) -> VerifiedTask | TaskProblem:
    """Check a task as it arrived in `_meta` against the mandate's *signers* (signer id -> base64 raw key)."""
    if not isinstance(raw_task, dict):
        return TaskProblem(TASK_MALFORMED, {"error": "interlock/task must be a JSON object"})
    if not isinstance(raw_sig, dict) or set(raw_sig) != {"signer", "sig"} or not all(
        isinstance(v, str) for v in raw_sig.values()
    ):  # fmt: skip
        return TaskProblem(TASK_MALFORMED, {"error": 'interlock/task_sig must be {"signer": ..., "sig": ...}'})
    signer = raw_sig["signer"]
    if raw_task.get("audience") is None:
        # Refused before the signature is even checked: whatever it says, a v1 task is bound to no one.
        return TaskProblem(TASK_WRONG_AUDIENCE, {"error": V1_TASK_ERROR, "task_version": 1, "signer": signer[:64]})
    public = signers.get(signer)
    if public is None:
        return TaskProblem(TASK_UNKNOWN_SIGNER, {"signer": signer[:64], "known": sorted(signers)})
    try:
        signature = base64.b64decode(raw_sig["sig"], validate=True)
        message = signing_bytes(raw_task)  # canonical_json refuses floats and non-JSON values
        Ed25519PublicKey.from_public_bytes(base64.b64decode(public)).verify(signature, message)
    except (binascii.Error, ValueError, TypeError):
        return TaskProblem(TASK_MALFORMED, {"error": "the task or its signature cannot be decoded", "signer": signer})
    except InvalidSignature:
        return TaskProblem(TASK_BAD_SIGNATURE, {"signer": signer, "task_digest": _safe_digest(raw_task)})
    try:
        task = Task.model_validate(raw_task)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return TaskProblem(TASK_MALFORMED, {"error": f"{where}: {first['msg']}", "signer": signer})
    digest = task_digest(raw_task)
    if now_ms >= task.expires_at:
        return TaskProblem(TASK_EXPIRED, {"task_id": task.task_id, "expires_at": task.expires_at, "now_ms": now_ms,
                                          "task_digest": digest})  # fmt: skip
    unknown = sorted(set(task.grants) - set(TOOLS))
    if unknown:
        error = f"grants name unknown tool {unknown[0]!r}"
        return TaskProblem(TASK_MALFORMED, {"error": error, "task_id": task.task_id})
    return VerifiedTask(task=task, digest=digest, signer=signer)


def _safe_digest(raw_task: Mapping[str, Any]) -> str | None:
    try:
        return task_digest(raw_task)
    except (TypeError, ValueError):
        return None


def new_task(task_id: str, expires_at: int, tool: str, *, merchant_id: str | None = None,
             agent_ids: Sequence[str] | None = None, subjects: list[str] | None = None,
             order_id: str | None = None, customer_id: str | None = None,
             max_amount_minor: int | None = None, purpose: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A one-tool task as plain JSON data (absent fields left out), validated before anyone signs it.

    Without *merchant_id* and *agent_ids* it has no audience — the v1 shape, which verify_task refuses; kept
    so a test can show that refusal. Every producer of real tasks names both."""
    grant = {"subjects": subjects, "order_id": order_id, "customer_id": customer_id,
             "max_amount_minor": max_amount_minor}  # fmt: skip
    task: dict[str, Any] = {"task_id": task_id, "expires_at": expires_at,
                            "grants": {tool: {k: v for k, v in grant.items() if v is not None}}}  # fmt: skip
    if merchant_id is not None or agent_ids is not None:
        task["audience"] = {"merchant_id": merchant_id, "agent_ids": list(agent_ids or [])}
    if purpose is not None:
        task["purpose"] = purpose
    Task.model_validate(task)  # raises ValidationError naming the field
    return task
