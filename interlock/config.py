"""Configuration from INTERLOCK_* environment variables (and REDIS_URL), validated at load.

Every actor calls `load_settings()` once at start and `settings.require(name)` for what it
cannot run without, so a missing or malformed variable fails fast with a message naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from interlock.errors import ConfigError

ENV_PREFIX = "INTERLOCK_"
# ADR 0009. 15 min covers the longest a caller may still hold a RETRY_SAME_CALL for its first call: the
# ingress wait (15 s) plus reconciliation up to INTERLOCK_RECONCILE_MAX_AGE_MS (10 min), with margin.
DEFAULT_SETTLEMENT_GRACE_MS = 900_000
# ADR 0009: a call not admitted within two days of being received is refused at admission (nothing moves): the
# calls queued through a rail worker outage of up to a day still run once it is back (their agents were told to
# repeat them, and the repeats land on them). A settlement's is held to its window (rail_worker/grace.py).
DEFAULT_DECISION_MAX_AGE_MS = 172_800_000
# NTP keeps a deployment's hosts within milliseconds of each other; 5 s leaves room for a clock NTP has not stepped
# back into line yet (a VM resumed, a host just booted). Timestamps one process wrote are compared with another's
# only with this allowance, in the direction that errs towards refusing or waiting.
DEFAULT_CLOCK_SKEW_MS = 5_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    ledger: Path | None = Field(default=None, description="path of the SQLite ledger file")
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "INTERLOCK_REDIS_URL"), description="Redis URL"
    )
    mandate: Path | None = Field(default=None, description="path of the mandate YAML")
    mandate_dir: Path | None = Field(default=None, description="directory of mandates, one per agent")
    mandate_pubkeys: str | None = Field(default=None, description="comma-separated Ed25519 public key files")
    rail_url: str | None = Field(default=None, description="rail origin, e.g. https://api.razorpay.com")
    rail_key_id: str | None = Field(default=None, description="rail API key id (basic auth user)")
    rail_key_secret: str | None = Field(default=None, description="rail API key secret (basic auth password)")
    rail_account_id: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_]{1,64}$",
        description="the rail account the configured key reaches (Razorpay: acc_...); mandates must name it as "
        "rail.account_id (ADR 0021)",
    )  # fmt: skip
    rail_timeout_ms: int = Field(default=10_000, gt=0, description="timeout of one rail call")
    rail: Literal["razorpay-rest", "mcp-upstream"] = Field(
        default="razorpay-rest", description="how Interlock reaches the rail: Razorpay REST or an upstream MCP server"
    )
    upstream_command: str | None = Field(default=None, description="upstream MCP server command line (stdio)")
    upstream_url: str | None = Field(default=None, description="upstream MCP server URL (streamable HTTP)")
    upstream_tools: str | None = Field(
        default=None,
        description="JSON object renaming the upstream tools the proxy adapter reads with, e.g. "
        '{"fetch_balance": null} (docs/proxy.md)',
    )
    upstream_manifest_ttl_ms: int = Field(
        default=1000, ge=0, description="how long a fetched upstream tool manifest is reused (0: fetch every time)"
    )
    reconcile_min_delay_ms: int = Field(default=2000, ge=0, description="wait after an attempt before reconciling")
    reconcile_max_passes: int = Field(default=20, gt=0, description="inconclusive passes before QUARANTINED")
    reconcile_max_age_ms: int = Field(default=600_000, gt=0, description="age of UNKNOWN before QUARANTINED")
    lease_ttl_ms: int = Field(default=30_000, gt=0, description="rail worker lease and IN_FLIGHT lease")
    rail_concurrency: int = Field(
        default=64, ge=1, le=1024, description="money calls the rail worker keeps in flight at once (1: one at a time)"
    )
    gate_concurrency: int = Field(
        default=16, ge=1, le=256,
        description="proposals one gate worker evaluates at once (each waits on its own rail read)",
    )  # fmt: skip
    settlement_window_grace_ms: int = Field(
        default=DEFAULT_SETTLEMENT_GRACE_MS, ge=0,
        description="after an idempotency window's boundary, how long a repeat of a settlement still lands on "
        "the previous window's intent (capped at half the window)",
    )  # fmt: skip
    clock_skew_ms: int = Field(
        default=DEFAULT_CLOCK_SKEW_MS, ge=0,
        description="the most two of the deployment's wall clocks (ingress, gate workers, rail worker, reconciler, "
        "operator commands) may differ; rules that compare one process's timestamps with another's allow it",
    )  # fmt: skip
    decision_max_age_ms: int = Field(
        default=DEFAULT_DECISION_MAX_AGE_MS, gt=0,
        description="how long after the ingress received a money call its Decision may still be admitted; an older "
        "one is refused (DECISION_EXPIRED, nothing moved); a settlement's only until the end of the window after the "
        "one it was received in",
    )  # fmt: skip
    shard: str = Field(default="0", pattern=r"^[A-Za-z0-9_-]{1,32}$", description="ledger shard served")
    shards: Path | None = Field(default=None, description="path of the shard map YAML (SPEC §15; unset: one shard)")
    replica_url: str | None = Field(
        default=None, description="Litestream replica of each shard's ledger (file:///other/disk, s3://bucket/path; "
        "a shard's own path under it when there are several; unset: not replicated; ADR 0029)",
    )  # fmt: skip
    replica_sync_interval: str = Field(
        default="1s", pattern=r"^[0-9]+(ms|s|m)$",
        description="how often Litestream ships the ledger's WAL to the replica: about the most a lost machine loses",
    )  # fmt: skip
    agent_id: str | None = Field(default=None, description="trusted agent id for the stdio ingress")
    merchant_id: str | None = Field(default=None, description="trusted merchant id (else the mandate's)")
    agent_tokens: Path | None = Field(default=None, description="YAML of agent token hashes for HTTP ingress")
    outcome_wait_ms: int = Field(default=15_000, gt=0, description="how long the ingress waits for an outcome")
    # What one client may hold of the ingress (ADR 0017, docs/ingress.md "Limits"): every agent needs a socket, a
    # session and a Redis connection to wait on, so none may take them all.
    agent_max_money_calls: int = Field(
        default=64, ge=1, le=4096,
        description="money calls one agent may have waiting for their outcome at once; one more is refused "
        "(AGENT_CALL_LIMIT, nothing recorded)",
    )  # fmt: skip
    ingress_max_money_calls: int = Field(
        default=256, ge=1, le=4096,
        description="money calls the ingress keeps waiting at once for all agents (each holds a Redis connection "
        "of its shard's wait pool, sized to this); one more is refused (INGRESS_BUSY, nothing recorded)",
    )  # fmt: skip
    agent_max_other_calls: int = Field(
        default=16, ge=1, le=32,
        description="read, interlock_status and pass-through calls one agent may have in flight at once (they share "
        "64 threads); one more is refused (AGENT_CALL_LIMIT)",
    )  # fmt: skip
    http_max_connections: int = Field(
        default=400, ge=2, le=65_536,
        description="open HTTP connections; a new one past it closes the connection that has waited longest "
        "without sending a request (or is refused 503 when every connection is serving one)",
    )  # fmt: skip
    http_header_timeout_ms: int = Field(
        default=10_000, ge=100, le=300_000,
        description="time a connection has to send a request's headers (from its opening or its previous answer)",
    )  # fmt: skip
    http_body_timeout_ms: int = Field(
        default=15_000, ge=100, le=300_000, description="time a request has to send its body once its headers are in"
    )
    http_max_sessions: int = Field(default=1024, ge=1, le=100_000, description="MCP sessions open at once, all agents")
    http_agent_max_sessions: int = Field(
        default=8, ge=1, le=10_000,
        description="MCP sessions one agent may hold; a new one closes that agent's oldest idle session "
        "(refused 503 when all are busy)",
    )  # fmt: skip
    http_session_idle_ms: int = Field(
        default=120_000, ge=1000, le=86_400_000,
        description="an MCP session with no request in flight (and no open GET stream) for this long is closed",
    )  # fmt: skip
    kill_at: str | None = Field(default=None, description="failpoint name at which to SIGKILL (chaos only)")
    console_token: str | None = Field(default=None, description="token that unlocks the operator web console")
    webhook_secrets: str | None = Field(
        default=None, description="Razorpay webhook secret(s), comma-separated, all accepted (SPEC §17)"
    )
    webhook_inbox: Path | None = Field(
        default=None, description="SQLite file the webhook receiver stores accepted events in (default: beside the "
        "ledger, webhooks.sqlite3)",
    )  # fmt: skip
    webhook_rate: int = Field(default=100, gt=0, le=100_000, description="webhook deliveries accepted per second")
    lifecycle_poll_ms: int = Field(
        default=2000, gt=0, description="first fetch of an applied refund or settlement not final yet, when no "
        "webhooks are configured (doubling to an hour); with webhooks, a minute",
    )
    webhook_silence_ms: int = Field(
        default=600_000, gt=0, description="no webhook for this long after a money call that should have caused one: "
        "the stream is taken as stopped and every entity not final is fetched (the backfill)",
    )
    approvers: Path | None = Field(
        default=None, description="YAML of approver credential hashes: who may decide holds (ADR 0015)"
    )
    approver_token: str | None = Field(
        default=None, description="the approver's own token, for `interlock holds approve/reject` (else a prompt)"
    )
    notify_url: str | None = Field(
        default=None, description="where the reconciler POSTs a Slack-compatible message for each new held call, "
        "quarantined intent and attention (issue 48 item 5; unset: none is sent)",
    )  # fmt: skip
    notify_secret: str | None = Field(
        default=None, min_length=16, description="the key each notification is signed with (X-Interlock-Signature, "
        "HMAC-SHA256); required with INTERLOCK_NOTIFY_URL",
    )  # fmt: skip

    @model_validator(mode="after")
    def _one_client_cannot_take_everything(self) -> Settings:
        # A per-client cap at or above the total would let one agent hold all of it: keep room for another.
        for one, total in (("agent_max_money_calls", "ingress_max_money_calls"),
                           ("http_agent_max_sessions", "http_max_sessions")):  # fmt: skip
            if getattr(self, one) * 2 > getattr(self, total):
                raise ValueError(
                    f"{env_name(one)}={getattr(self, one)} must be at most half of {env_name(total)}="
                    f"{getattr(self, total)}, so that one agent cannot take all of it"
                )
        if self.notify_url is not None and self.notify_secret is None:
            raise ValueError("INTERLOCK_NOTIFY_URL is set, so INTERLOCK_NOTIFY_SECRET must be too (at least 16 "
                             "characters): every notification is signed, so a receiver can tell it from a forgery")
        if self.notify_url is not None and not self.notify_url.startswith(("https://", "http://")):
            raise ValueError(f"INTERLOCK_NOTIFY_URL must be an http(s) URL, got {self.notify_url!r}")
        return self

    def require(self, name: str) -> Any:
        """Return setting *name* or raise ConfigError naming the environment variable to set."""
        value = getattr(self, name)
        if value is None or value == "":
            field = type(self).model_fields[name]
            raise ConfigError(
                f"{env_name(name)} is not set; it is required here ({field.description})", variable=env_name(name)
            )
        return value


def env_name(field_name: str) -> str:
    if field_name == "redis_url":
        return "REDIS_URL"
    return ENV_PREFIX + field_name.upper()


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; a malformed variable raises ConfigError naming it."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a check across settings: its message names the variables
                problems.append(str(err["msg"]).removeprefix("Value error, "))
                continue
            name = str(err["loc"][0])
            problems.append(f"{env_name(name)}: {err['msg']} (got {err.get('input')!r})")
        first = str(exc.errors()[0]["loc"][0]) if exc.errors() and exc.errors()[0]["loc"] else None
        raise ConfigError(
            "bad configuration: " + "; ".join(problems), variable=env_name(first) if first else None
        ) from None
