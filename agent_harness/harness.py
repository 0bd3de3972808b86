"""The application's side of Interlock: who it acts for, the key it signs tasks with, and a business action per
thing a person asked for. Tasks are built and signed by Interlock's own code (interlock/task.py, the same as
`interlock task sign`), so the wire format has one implementation."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent_harness.action import Action, Escalation, RetryPolicy, log_escalation
from interlock.mandate_sign import load_private_key
from interlock.task import new_task, sign_task
from interlock.tools import OPERATION_REF_PATTERN


@dataclass(frozen=True)
class Harness:
    """*merchant_id* and *agent_ids* are the audience every task names (SPEC §10 v2); *key* and *signer* are the
    harness's Ed25519 key and the id the mandate's `task_signers` lists it under. Without a key, actions carry
    the operation_ref only (a mandate with `task_binding: required` then refuses every money call)."""

    merchant_id: str
    agent_ids: Sequence[str]
    key: Ed25519PrivateKey | None = None
    signer: str = "harness"
    task_ttl_s: int = 3600
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    on_escalate: Callable[[Escalation], None] = log_escalation

    @classmethod
    def from_key_file(cls, key_path: str | Path, *, merchant_id: str, agent_ids: Sequence[str],
                      signer: str = "harness", **options: Any) -> Harness:  # fmt: skip
        """With the PEM private key `interlock mandate keygen` writes (`interlock task signer` prints its line)."""
        return cls(merchant_id, tuple(agent_ids), load_private_key(Path(key_path)), signer, **options)

    def action(self, operation_ref: str, *, tool: str = "create_refund", subjects: Sequence[str] | None = None,
               order_id: str | None = None, customer_id: str | None = None, max_amount_minor: int | None = None,
               purpose: str | None = None, task_id: str | None = None) -> Action:  # fmt: skip
        """A business action, to be used as `with harness.action(...)` around the agent's run.

        *operation_ref* is the application's name for the operation — derive it from the ticket or order, so
        a restarted run names the same operation; the task grants *tool* narrowed to the given referents and
        total (ADR 0013) and is valid for *task_ttl_s*. One action is one money movement: a second, different
        movement under the same operation_ref is refused by Interlock with KEY_CONFLICT. *task_id* defaults to
        the operation_ref; give the ticket's id when one ticket has several actions, so that *max_amount_minor*
        caps their sum (Interlock counts a ceiling per signer and task_id)."""
        if not re.match(OPERATION_REF_PATTERN, operation_ref):
            raise ValueError(f"operation_ref must match {OPERATION_REF_PATTERN}: {operation_ref!r}")
        task_meta = {}
        if self.key is not None:
            expires_at = int(time.time() * 1000) + self.task_ttl_s * 1000
            task = new_task(task_id or operation_ref, expires_at, tool, merchant_id=self.merchant_id,
                            agent_ids=list(self.agent_ids), subjects=None if subjects is None else list(subjects),
                            order_id=order_id, customer_id=customer_id, max_amount_minor=max_amount_minor,
                            purpose=purpose)  # fmt: skip
            task_meta = sign_task(task, self.key, self.signer)
        return Action(operation_ref, task_meta, self.policy, self.on_escalate)
