"""Bearer tokens for the HTTP ingress (SPEC §10): only their sha256 is ever stored.

INTERLOCK_AGENT_TOKENS names a YAML file `agents: {<agent_id>: {token_sha256: <hex>}}`. A presented
token is hashed and compared against every entry in constant time, so neither the match position nor
the presence of a near-miss leaks through timing; a token that matches nothing has no agent.
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

_AGENT_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
TOKEN_BYTES = 32


def token_sha256(token: str) -> str:
    """Lower-case hex sha256 of the token's UTF-8 bytes: the only form a token is kept in."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def yaml_entry(agent_id: str, digest: str) -> str:
    """The line an operator adds to the tokens file for *agent_id*."""
    return f"agents: {{{agent_id}: {{token_sha256: {digest}}}}}"


@dataclass(frozen=True)
class TokenTable:
    """agent_id → token sha256, loaded once at start; restart the ingress to rotate tokens."""

    digests: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> TokenTable:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"INTERLOCK_AGENT_TOKENS={path}: cannot read ({exc.strerror or exc})",
                              variable="INTERLOCK_AGENT_TOKENS") from None  # fmt: skip
        try:
            # Strict: an agent listed twice is refused. PyYAML would keep the last entry silently, so the
            # reviewed file could name one token while another one authenticates as that agent.
            data: Any = strict_yaml.load(text, str(path))[1]
        except strict_yaml.YamlProblem as exc:
            raise ConfigError(f"INTERLOCK_AGENT_TOKENS={exc}", variable="INTERLOCK_AGENT_TOKENS") from None
        return cls.parse(data, source=str(path))

    @classmethod
    def parse(cls, data: Any, *, source: str = "<tokens>") -> TokenTable:
        def bad(message: str) -> ConfigError:
            return ConfigError(f"INTERLOCK_AGENT_TOKENS={source}: {message}", variable="INTERLOCK_AGENT_TOKENS")

        if not isinstance(data, dict) or set(data) != {"agents"} or not isinstance(data["agents"], dict):
            raise bad("expected exactly one top-level key `agents: {<agent_id>: {token_sha256: <hex>}}`")
        digests: dict[str, str] = {}
        for agent_id, entry in data["agents"].items():
            if not isinstance(agent_id, str) or not _AGENT_ID.match(agent_id):
                raise bad(f"agent id {agent_id!r} must be 1-64 characters of [A-Za-z0-9_]")
            if not isinstance(entry, dict) or set(entry) != {"token_sha256"}:
                raise bad(f"agents.{agent_id} must be exactly {{token_sha256: <hex>}}")
            digest = entry["token_sha256"]
            if not isinstance(digest, str) or not _SHA256_HEX.match(digest):
                raise bad(f"agents.{agent_id}.token_sha256 must be 64 lower-case hex characters")
            digests[agent_id] = digest
        if not digests:
            raise bad("lists no agents; add one with the line printed by `interlock token new AGENT_ID`")
        return cls(digests)

    def agent_for(self, token: str) -> str | None:
        """The agent whose token this is, or None. Every entry is compared: no early exit on a match."""
        presented = token_sha256(token).encode("ascii")
        found: str | None = None
        for agent_id, digest in self.digests.items():
            if hmac.compare_digest(presented, digest.encode("ascii")):
                found = agent_id
        return found
