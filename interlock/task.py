"""Task binding (SPEC §10 "interlock/task"): what *this* call is about, signed by the application harness.

The mandate says what an agent may ever do; a task says what the person asked for now — which tools, which
payment, order or customer, and how much in total, until when. The harness (the ticket system, the agent
host — never the model) puts the task in the tool call's `_meta["interlock/task"]` and a detached Ed25519
signature in `_meta["interlock/task_sig"]`:

    {"signer": "<signer_id>", "sig": base64(Ed25519(b"interlock-task-v1\\n" + RFC 8785 JSON of the task))}

by a key the mandate lists under `task_signers` (base64 of the raw 32-byte public key). The signature covers
the task exactly as received (its canonical JSON), so any language with an RFC 8785 encoder can produce it;
`task_digest` is the sha256 hex of those same canonical bytes and is what the ledger and the audit log record.
Verification is a value, never an exception: a VerifiedTask, or a TaskProblem with a stable reason code.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from interlock.canonical import canonical_json, sha256_hex
from interlock.tools import TOOLS

TASK_META_KEY = "interlock/task"
TASK_SIG_META_KEY = "interlock/task_sig"
TASK_SIGNING_CONTEXT = b"interlock-task-v1\n"  # domain separation: a task signature is never a mandate's

# Reason codes of a task that cannot be trusted (G1); each is BLOCK and nothing reaches the rail.
TASK_MALFORMED = "G1_TASK_MALFORMED"
TASK_UNKNOWN_SIGNER = "G1_TASK_UNKNOWN_SIGNER"
TASK_BAD_SIGNATURE = "G1_TASK_BAD_SIGNATURE"
TASK_EXPIRED = "G1_TASK_EXPIRED"
TASK_REQUIRED = "G1_TASK_REQUIRED"
TOOL_NOT_IN_TASK = "G1_TOOL_NOT_IN_TASK"
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


class Task(_Strict):
    task_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
    expires_at: Annotated[StrictInt, Field(ge=0)]
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

    def grant(self, tool: str) -> TaskGrant | None:
        return self.task.grants.get(tool)


@dataclass(frozen=True, slots=True)
class TaskProblem:
    reason_code: str
    detail: dict[str, Any] = field(default_factory=dict)


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


def new_task(task_id: str, expires_at: int, tool: str, *, subjects: list[str] | None = None,
             order_id: str | None = None, customer_id: str | None = None,
             max_amount_minor: int | None = None, purpose: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A one-tool task as plain JSON data (absent fields left out), validated before anyone signs it."""
    grant = {"subjects": subjects, "order_id": order_id, "customer_id": customer_id,
             "max_amount_minor": max_amount_minor}  # fmt: skip
    task = {"task_id": task_id, "expires_at": expires_at,
            "grants": {tool: {k: v for k, v in grant.items() if v is not None}}}  # fmt: skip
    if purpose is not None:
        task["purpose"] = purpose
    Task.model_validate(task)  # raises ValidationError naming the field
    return task
