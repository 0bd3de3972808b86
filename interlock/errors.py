"""The one hierarchy of Interlock errors.

A gate rejection is a value (verdict + reason code), never an exception; these are for
calls that cannot proceed at all.
"""

from __future__ import annotations


class InterlockError(Exception):
    """Raised when Interlock refuses to proceed; the base of every error below."""


class ConfigError(InterlockError):
    """Raised when a required setting is missing or malformed; names the variable."""

    def __init__(self, message: str, *, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable


class InvalidInput(InterlockError, ValueError):
    """Raised when a tool call or message carries a malformed field; names the field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidAmount(InvalidInput):
    """Raised when an amount is not a positive integer of minor units (floats, bools, strings, 0, <0)."""


class MandateError(InterlockError):
    """Raised when a mandate file is missing, malformed, unsigned where signatures are required, or invalid."""


class PurposeModelUnavailable(InterlockError):
    """Raised when a mandate turns G5 on and its model is not installed; the message names the extra to install."""


class IllegalTransition(InterlockError):
    """Raised when an event is not allowed from an intent's current state (SPEC §6)."""

    def __init__(self, sik: str, state: str, event: str) -> None:
        super().__init__(f"illegal transition for intent {sik}: {event} is not allowed from {state}")
        self.sik = sik
        self.state = state
        self.event = event


class IntentNotFound(InterlockError):
    """Raised when no intent exists for a (merchant_id, sik)."""

    def __init__(self, merchant_id: str, sik: str) -> None:
        super().__init__(f"no intent for merchant {merchant_id} with sik {sik}")
        self.merchant_id = merchant_id
        self.sik = sik


class LedgerError(InterlockError):
    """Raised when the ledger file cannot be opened with the durability it requires (WAL, synchronous=FULL)."""


class RestorePending(LedgerError):
    """Raised when a ledger restored from its replica has not finished the restore protocol (ADR 0029)."""


class AuditChainBroken(LedgerError):
    """Raised when the audit chain fails verification; carries the first divergent seq."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"audit chain broken at seq {seq}")
        self.seq = seq


class MisroutedCall(InterlockError):
    """Raised when a call reaches a shard the shard map does not assign its merchant to; names both shards."""

    def __init__(self, message: str, *, merchant_id: str, shard: str, home: str) -> None:
        super().__init__(message)
        self.merchant_id = merchant_id
        self.shard = shard
        self.home = home


class LeaseHeld(InterlockError):
    """Raised when another live owner holds the singleton lease (a second rail worker must refuse to run)."""

    def __init__(self, name: str, owner: str, expires_in_ms: int) -> None:
        super().__init__(
            f"lease {name!r} is held by {owner} (heartbeat fresh; expires in {expires_in_ms} ms); refusing to start"
        )
        self.name = name
        self.owner = owner


class StaleLease(InterlockError):
    """Raised when a write is fenced out because its lease epoch or attempt_seq was superseded."""

    def __init__(self, sik: str, detail: str) -> None:
        super().__init__(f"stale write refused for intent {sik}: {detail}")
        self.sik = sik


class KeyConflict(InterlockError):
    """Raised when an operation_ref already bound to one SIK is reused for different terms."""

    def __init__(self, operation_ref: str, bound_sik: str, new_sik: str) -> None:
        super().__init__(f"operation_ref {operation_ref!r} is bound to sik {bound_sik}, not {new_sik}")
        self.operation_ref = operation_ref
        self.bound_sik = bound_sik
        self.new_sik = new_sik


class OperatorRefused(InterlockError):
    """Raised when an operator action is not allowed (wrong approver, expired hold, changed terms, stamp
    on the rail, ...); the message says why and what to do instead, and nothing was written."""

    def __init__(self, sik: str, message: str) -> None:
        super().__init__(f"refused for intent {sik}: {message}")
        self.sik = sik
        self.reason = message
