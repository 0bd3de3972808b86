"""Approver credentials (ADR 0015): who a person deciding a hold *is*, proven, not typed in.

INTERLOCK_APPROVERS names a YAML file `approvers: {<approver_id>: {token_sha256: <hex>}}`, read strictly (a
name written twice is refused). Each token is minted by `interlock approver new ID` — 32 random bytes, shown
once — so only its sha256 is kept: a 256-bit random secret needs no slow, salted hash (nothing to guess), and
a leaked file lets nobody log in. A presented token is hashed and compared against every entry in constant time.

The file authenticates people; the intent's mandate (`approval.approvers`) decides whether that person may decide
for that intent at all (`approver_problem`): approve or reject its hold, resolve its quarantine, acknowledge its
attention — the same rule for the CLI and the console, which calls these ops/ functions. The file is re-read on
every action, so removing or rotating an entry takes effect at once: an `Approver` carries the digest it
authenticated with and is refused when the file no longer has it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interlock import strict_yaml
from interlock.errors import ConfigError
from interlock.mandate import MandateStore
from ledger.intents import Intent

VARIABLE = "INTERLOCK_APPROVERS"
TOKEN_VARIABLE = "INTERLOCK_APPROVER_TOKEN"
TOKEN_BYTES = 32
MIN_TOKEN_LENGTH = 32  # a minted token is 43 characters; anything much shorter was not minted here
# The same shape the mandate allows for an approver (interlock.mandate_model.Approver), minus what breaks YAML.
_APPROVER_ID = re.compile(r"^[A-Za-z0-9_.@+-]{1,254}$")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def valid_id(approver_id: str) -> bool:
    return bool(_APPROVER_ID.match(approver_id))


def yaml_entry(approver_id: str, digest: str) -> str:
    return f"  {approver_id}: {{token_sha256: {digest}}}"


@dataclass(frozen=True, slots=True)
class Approver:
    """A person who presented their own credential. Build one only through `ApproverTable.authenticate`."""

    approver_id: str
    token_sha256: str

    @property
    def credential(self) -> str:
        """What the audit record names: which credential was used (a prefix of its hash, never the token)."""
        return f"approver-token:{self.token_sha256[:12]}"


@dataclass(frozen=True)
class ApproverTable:
    digests: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> ApproverTable:
        source = f"{VARIABLE}={path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read ({exc.strerror or exc})", variable=VARIABLE) from None
        try:
            data = strict_yaml.load(text, str(path))[1]
        except strict_yaml.YamlProblem as exc:
            raise ConfigError(f"{VARIABLE}: {exc}", variable=VARIABLE) from None
        return cls.parse(data, source=source)

    @classmethod
    def parse(cls, data: Any, *, source: str = VARIABLE) -> ApproverTable:
        def bad(message: str) -> ConfigError:
            return ConfigError(f"{source}: {message}", variable=VARIABLE)

        if not isinstance(data, dict) or set(data) != {"approvers"} or not isinstance(data["approvers"], dict):
            raise bad("expected exactly one top-level key `approvers: {<approver_id>: {token_sha256: <hex>}}`")
        digests: dict[str, str] = {}
        for approver_id, entry in data["approvers"].items():
            if not isinstance(approver_id, str) or not valid_id(approver_id):
                raise bad(f"approver id {approver_id!r} must be 1-254 characters of [A-Za-z0-9_.@+-]")
            if not isinstance(entry, dict) or set(entry) != {"token_sha256"}:
                raise bad(f"approvers.{approver_id} must be exactly {{token_sha256: <hex>}}")
            digest = entry["token_sha256"]
            if not isinstance(digest, str) or not _SHA256_HEX.match(digest):
                raise bad(f"approvers.{approver_id}.token_sha256 must be 64 lower-case hex characters")
            if digest in digests.values():
                raise bad(f"approvers.{approver_id} has the same token as another approver; mint one each")
            digests[approver_id] = digest
        if not digests:
            raise bad("lists no approvers; add one with the line printed by `interlock approver new APPROVER_ID`")
        return cls(digests)

    def authenticate(self, token: str) -> Approver | None:
        """The approver whose token this is, or None. Every entry is compared: no early exit on a match."""
        presented = token_sha256(token).encode("ascii")
        found: Approver | None = None
        for approver_id, digest in self.digests.items():
            if hmac.compare_digest(presented, digest.encode("ascii")):
                found = Approver(approver_id, digest)
        return found if len(token) >= MIN_TOKEN_LENGTH else None

    def current(self, approver: Approver) -> bool:
        """Whether this credential is still in the file (not removed, not rotated since it was presented)."""
        digest = self.digests.get(approver.approver_id)
        return digest is not None and hmac.compare_digest(digest, approver.token_sha256)


def approver_problem(mandates: MandateStore, intent: Intent, approver_id: str) -> str | None:
    """Why *approver_id* may not decide anything for *intent*, naming who may; None if they may.

    Only an approver named by the mandate configured now for the intent's agent, and only while that mandate is for
    the intent's merchant, decides its hold, its quarantine or its attention: an approver of one merchant decides
    nothing of another's."""
    mandate = mandates.get(intent.agent_id)
    if mandate is None:
        return f"no mandate is configured for agent {intent.agent_id!r}, so nobody may decide for it"
    if mandate.merchant_id != intent.merchant_id:
        return (f"mandate {mandate.mandate_id} is for merchant {mandate.merchant_id}, not {intent.merchant_id}; "
                f"nobody it names decides for {intent.merchant_id}")  # fmt: skip
    if approver_id not in mandate.approval.approvers:
        named = ", ".join(mandate.approval.approvers)
        who = f"only {named} may decide" if named else "it names no approver, so nobody may decide"
        return (f"{approver_id!r} is not an approver of mandate {mandate.mandate_id} (it names: {named or 'nobody'}); "
                f"{who} for merchant {intent.merchant_id}")  # fmt: skip
    return None
