"""The mandate model (SPEC §11): what the human-approved YAML may say, and the rules across its fields.

`mandate_hash` is the sha256 of the canonical JSON (RFC 8785) of the *validated* mandate, dumped in JSON mode
with every default filled in — except the optional fields added for the seed's format and task binding
(`task_binding`, `task_signers`, `key_fields`, `manifest_sha256`, `trust_tier`, `purpose_check`, `rail`) and those
added since (a payout grant's `payees.unlisted`, a window's `tool` and `per_subject`, a grant's `free_text`), which
are left out while
unset, so a mandate that does not use them keeps the hash (and the signature) it had before they existed.
Loading with file:line errors is interlock.mandate_load; Ed25519 signing is interlock.mandate_sign.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, model_validator

from interlock.canonical import canonical_json, sha256_hex
from interlock.tools import MONEY_TOOLS, PAYOUT_TOOL, TOOLS

REFUND_TOOL = "create_refund"  # the one money tool without an idempotency window (SPEC §4)
# The call's fields each money tool's SIK already covers (SPEC §4): the seed's `idempotency.<tool>.key_fields`
# may name these and only these — payment_id is the subject Interlock resolved, amount the resolved amount.
SIK_FIELDS: dict[str, frozenset[str]] = {
    "create_refund": frozenset({"payment_id", "amount", "interlock_distinct_reason"}),
    "create_instant_settlement": frozenset({"amount", "settle_full_balance", "interlock_distinct_reason"}),
    # fund_account_id is the payee the rail returned (ADR 0028).
    "create_payout": frozenset({"fund_account_id", "amount", "interlock_distinct_reason"}),
}
TaskBinding = Literal["off", "optional", "required"]
PurposeMode = Literal["off", "hold", "block"]
# G5's default threshold: the highest that holds no benign case of the labelled set bench/purpose_cases.yaml for drift,
# for the model G5 ships with (`interlock bench purpose`; ADR 0006 says how and why).
DEFAULT_MIN_SIMILARITY = 0.41


Loc = tuple[str | int, ...]


class _Problem(NamedTuple):
    path: Loc  # relative to the model that found it
    message: str
    anchor: Loc | None = None  # where to point in the YAML when *path* itself is absent from it


class _Violations(ValueError):
    """Cross-field rule failures found by a model validator."""

    def __init__(self, problems: list[_Problem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def _check(pattern: str, what: str) -> AfterValidator:
    def validate(value: str) -> str:
        if not re.fullmatch(pattern, value):
            raise ValueError(f"must be {what}, got {value!r}")
        return value

    return AfterValidator(validate)


def _known_tool(name: str) -> str:
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r}; known tools: {', '.join(sorted(TOOLS))}")
    return name


def _is_one(value: int) -> int:
    if value != 1:
        raise ValueError(f"unsupported mandate version {value}; only v: 1 exists")
    return value


def _ed25519_public_key(value: str) -> str:
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("must be the base64 of a raw 32-byte Ed25519 public key") from None
    if len(raw) != 32:
        raise ValueError(f"must be the base64 of a raw 32-byte Ed25519 public key, got {len(raw)} bytes")
    return value


Minor = Annotated[StrictInt, Field(ge=1)]
NonNegativeMinor = Annotated[StrictInt, Field(ge=0)]
Millis = Annotated[StrictInt, Field(ge=1)]
EpochMs = Annotated[StrictInt, Field(ge=0)]
Currency = Annotated[str, _check(r"[A-Z]{3}", "a 3-letter upper-case ISO 4217 code such as INR")]
Ident = Annotated[str, _check(r"[A-Za-z0-9_]{1,64}", "1-64 characters of [A-Za-z0-9_]")]
MandateId = Annotated[str, _check(r"[A-Za-z0-9_.-]{1,64}", "1-64 characters of [A-Za-z0-9_.-]")]
Approver = Annotated[str, _check(r"\S{1,254}", "a non-empty identity without spaces, e.g. an email")]
Sha256Hex = Annotated[str, _check(r"[0-9a-f]{64}", "64 lower-case hex characters (a sha256)")]
ToolName = Annotated[str, AfterValidator(_known_tool)]
Ed25519PublicKeyB64 = Annotated[str, AfterValidator(_ed25519_public_key)]
PinnedToolName = Annotated[str, _check(r"[A-Za-z0-9_.-]{1,128}", "an MCP tool name")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _unset(value: Any) -> bool:
    return value is None


class ValueLimit(_Strict):
    # 0 only on a read-only grant (the seed's "moves no money"); a money grant needs at least 1 (_mandate_problems).
    min_amount_minor: NonNegativeMinor
    max_amount_minor: NonNegativeMinor
    currencies: list[Currency] = Field(min_length=1)

    @model_validator(mode="after")
    def _rules(self) -> ValueLimit:
        problems: list[_Problem] = []
        if self.min_amount_minor > self.max_amount_minor:
            message = f"{self.min_amount_minor} exceeds max_amount_minor {self.max_amount_minor}"
            problems.append(_Problem(("min_amount_minor",), message))
        if len(set(self.currencies)) != len(self.currencies):
            problems.append(_Problem(("currencies",), "lists a currency twice"))
        if problems:
            raise _Violations(problems)
        return self


FundAccountId = Annotated[str, _check(r"fa_[A-Za-z0-9]{14}", "a RazorpayX fund account id (fa_ and 14 characters)")]
ContactId = Annotated[str, _check(r"cont_[A-Za-z0-9]{14}", "a RazorpayX contact id (cont_ and 14 characters)")]
AccountNumber = Annotated[str, _check(r"[0-9]{9,18}", "a RazorpayX account number (9-18 digits)")]


UnlistedPayee = Literal["block", "hold"]


class Payees(_Strict):
    """Whom a create_payout grant may pay (ADR 0028): a fund account on the first list, or any fund account of a
    contact on the second — as the rail says the fund account is, never as the agent does. `unlisted` says what a
    call to any other payee is: refused (`block`, the default) or held for an approver (`hold`, ADR 0034), who
    sees the fund account as the rail reports it and may add it to these payees for later calls."""

    fund_account_ids: list[FundAccountId] = Field(default_factory=list)
    contact_ids: list[ContactId] = Field(default_factory=list)
    # Left out of the hash while it is the default, so a mandate that does not say it keeps its hash (and signature).
    unlisted: UnlistedPayee = Field(default="block", exclude_if=lambda v: v == "block")

    def allow(self, fund_account_id: str, contact_id: str) -> bool:
        """Whether the fund account the rail returned is one of these payees: by its id, or by its contact's."""
        return fund_account_id in self.fund_account_ids or contact_id in self.contact_ids

    @model_validator(mode="after")
    def _rules(self) -> Payees:
        if not self.fund_account_ids and not self.contact_ids and self.unlisted == "block":
            message = "payees must name at least one fund account or contact (or hold the others: unlisted: hold)"
            raise _Violations([_Problem(("fund_account_ids",), message)])
        return self


PayeeId = Annotated[str, _check(r"(fa|cont)_[A-Za-z0-9]{14}", "a RazorpayX fund account or contact id")]
UnlistedText = Literal["bounded", "none"]
_FIXED_TEXT = r"[A-Za-z0-9 ]{1,30}"  # RazorpayX's narration: 1-30 letters, digits and spaces


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"is not a regular expression ({exc})") from None
    return pattern


class FreeText(_Strict):
    """What an agent may write into the text that goes out with money (issue 47 item 4): the narration a payee reads
    on its bank statement, a settlement's description, and the value of every note of its own (kept on the rail's
    entity for the account holder). Unbounded, it is a hijacked agent's way to send the account holder's data to
    any payee the mandate allows. A call whose text breaks a rule is refused, never rewritten.

    `max_chars` and `pattern` (a regular expression each text must match whole) bound every such text. For a
    payout, `fixed` gives a payee (by fund account or contact) the one narration it may get, and `unlisted: none`
    sends no narration at all to a payee on no list (one a person approves as the call is held, ADR 0034)."""

    max_chars: Annotated[StrictInt, Field(ge=1, le=256)] | None = Field(default=None, exclude_if=_unset)
    pattern: Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_compiles)] | None = Field(
        default=None, exclude_if=_unset)
    fixed: dict[PayeeId, Annotated[str, _check(_FIXED_TEXT, "1-30 letters, digits or spaces (a narration)")]] = (
        Field(default_factory=dict, exclude_if=lambda v: not v))
    unlisted: UnlistedText = Field(default="bounded", exclude_if=lambda v: v == "bounded")

    def problem(self, texts: dict[str, str]) -> tuple[str, str] | None:
        """The first text of *texts* (where it is sent -> the text) that max_chars or pattern refuses, and why."""
        for where, text in texts.items():
            if self.max_chars is not None and len(text) > self.max_chars:
                return where, f"is {len(text)} characters; the mandate allows at most {self.max_chars}"
            if self.pattern is not None and re.fullmatch(self.pattern, text) is None:
                return where, f"does not match the mandate's pattern {self.pattern!r}"
        return None


class Grant(_Strict):
    reversibility: Literal["reversible", "irreversible"]
    value: ValueLimit | None = None
    # create_payout only, and left out of the hash while unset so every other grant keeps its hash.
    payees: Payees | None = Field(default=None, exclude_if=_unset)
    # create_payout only: a payout the balance cannot cover waits on the rail (true) or is refused (false, default).
    queue_if_low_balance: bool = Field(default=False, exclude_if=lambda v: v is False)
    # Any money grant: what text the agent may send with the money (FreeText); left out of the hash while unset.
    free_text: FreeText | None = Field(default=None, exclude_if=_unset)


class Scope(_Strict):
    grants: dict[ToolName, Grant] = Field(min_length=1)


class Window(_Strict):
    """A sliding window over the money calls of this mandate (G3): all of them, or one tool's (`tool`), and
    either together or each subject apart (`per_subject`: a payout's payee, a refund's payment, ADR 0028)."""

    window_ms: Millis
    max_calls: Minor | None = None
    max_amount_minor: Minor | None = None
    currency: Currency | None = None
    # Left out of the hash while unset, so a mandate whose windows count every call keeps its hash.
    tool: ToolName | None = Field(default=None, exclude_if=_unset)
    per_subject: bool = Field(default=False, exclude_if=lambda v: v is False)

    @model_validator(mode="after")
    def _rules(self) -> Window:
        if self.max_calls is None and self.max_amount_minor is None:
            raise _Violations([_Problem(("max_calls",), "a window needs max_calls, max_amount_minor or both")])
        if self.max_amount_minor is not None and self.currency is None:
            raise _Violations([_Problem(("currency",), "max_amount_minor needs the currency it counts")])
        if self.per_subject and self.tool is None:
            raise _Violations([_Problem(("per_subject",), "per_subject needs the tool whose subjects it counts "
                                        "(a payout's payee, a refund's payment)")])  # fmt: skip
        if self.tool is not None and self.tool not in MONEY_TOOLS:
            raise _Violations([_Problem(("tool",), f"{self.tool} moves no money; a window counts money calls")])
        return self


class FeeBudget(_Strict):
    window_ms: Millis
    max_fee_minor: NonNegativeMinor


class Limits(_Strict):
    windows: list[Window] = Field(default_factory=list)
    fee_budgets: dict[Currency, FeeBudget] = Field(default_factory=dict)


class IdempotencyRule(_Strict):
    window_ms: Millis | None = None  # null: no window, the operation is unique forever (refunds, SPEC §4)
    # The seed's spelling of what identifies an operation; Interlock's SIK decides, so only fields it covers.
    key_fields: list[str] | None = Field(default=None, exclude_if=_unset)


class Approval(_Strict):
    approvers: list[Approver] = Field(default_factory=list)
    hold_above_minor: Minor | None = None
    hold_expiry_ms: Millis = 86_400_000


class Pin(_Strict):
    sha256: Sha256Hex
    trust_tier: str | None = Field(default=None, min_length=1, max_length=64, exclude_if=_unset)  # recorded by G6


class Provenance(_Strict):
    server_id: str | None = None
    # The seed's hash of the whole manifest: recorded with the mandate; G6 judges each tool's own pin.
    manifest_sha256: Sha256Hex | None = Field(default=None, exclude_if=_unset)
    # Keys are not restricted to Interlock's own tools: in proxy mode upstream tools are pinned too.
    pinned_manifests: dict[PinnedToolName, Pin] = Field(default_factory=dict)


class PurposeCheck(_Strict):
    """G5 (SPEC §7, ADR 0006): whether a local model compares each money call with the purpose, and what an
    objection does. It can only ever HOLD or BLOCK; off (the default) leaves the deterministic verdict alone."""

    mode: PurposeMode = "off"
    min_similarity: float = Field(default=DEFAULT_MIN_SIMILARITY, ge=-1.0, le=1.0)


class RailSection(_Strict):
    """The rail account this mandate's money moves on (issue 25 item 8, ADR 0021), and the RazorpayX account
    payouts are made from (SPEC §18)."""

    account_id: Ident | None = None
    account_number: AccountNumber | None = Field(default=None, exclude_if=_unset)


class Mandate(_Strict):
    v: Annotated[StrictInt, AfterValidator(_is_one)]
    mandate_id: MandateId
    merchant_id: Ident
    agent_id: Ident
    issued_at: EpochMs
    expires_at: EpochMs
    purpose: str = Field(min_length=1, max_length=2000)
    scope: Scope
    limits: Limits = Field(default_factory=Limits)
    idempotency: dict[ToolName, IdempotencyRule] = Field(default_factory=dict)
    approval: Approval = Field(default_factory=Approval)
    provenance: Provenance = Field(default_factory=Provenance)
    # Task binding (SPEC §10): whether a money call needs a harness-signed task, and whose keys sign tasks.
    task_binding: TaskBinding = Field(default="optional", exclude_if=lambda v: v == "optional")
    task_signers: dict[Ident, Ed25519PublicKeyB64] = Field(default_factory=dict, exclude_if=lambda v: not v)
    # Left out of the hash while unset, so a mandate that names no account keeps its hash (and signature).
    rail: RailSection = Field(default_factory=RailSection, exclude_if=lambda v: v == RailSection())
    # Left out of the hash while it is the default, so a mandate that does not turn G5 on keeps its hash.
    purpose_check: PurposeCheck = Field(default_factory=PurposeCheck, exclude_if=lambda v: v == PurposeCheck())

    @model_validator(mode="after")
    def _rules(self) -> Mandate:
        problems = list(_mandate_problems(self))
        if problems:
            raise _Violations(problems)
        return self

    @property
    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical JSON of the validated mandate (defaults filled in): what is hashed and signed."""
        data = self.model_dump(mode="json")
        if "purpose_check" in data:
            # interlock.canonical refuses floats (money is integer minor units): the threshold is hashed as its
            # shortest decimal text, which names the same float on every machine.
            data["purpose_check"]["min_similarity"] = repr(float(data["purpose_check"]["min_similarity"]))
        return canonical_json(data)

    @property
    def mandate_hash(self) -> str:
        # Recomputed, not cached: a cached value would survive model_copy(update=...) and lie.
        return sha256_hex(self.canonical_bytes)

    def grant(self, tool: str) -> Grant | None:
        return self.scope.grants.get(tool)

    def window_ms(self, tool: str) -> int | None:
        """The SIK window of *tool* (SPEC §4); None for refunds and for tools without one."""
        rule = self.idempotency.get(tool)
        return rule.window_ms if rule is not None else None

    def pin(self, tool: str) -> str | None:
        pin = self.provenance.pinned_manifests.get(tool)
        return pin.sha256 if pin is not None else None

    def trust_tier(self, tool: str) -> str | None:
        pin = self.provenance.pinned_manifests.get(tool)
        return pin.trust_tier if pin is not None else None

    def is_active(self, now_ms: int) -> bool:
        """True when issued_at <= now_ms < expires_at."""
        return self.issued_at <= now_ms < self.expires_at


def _mandate_problems(m: Mandate) -> Iterator[_Problem]:
    if m.issued_at >= m.expires_at:
        yield _Problem(("expires_at",), f"{m.expires_at} must be later than issued_at {m.issued_at}")
    for tool, grant in m.scope.grants.items():
        path: Loc = ("scope", "grants", tool)
        if tool in MONEY_TOOLS:
            if grant.value is None:
                message = f"{tool} moves money, so its grant needs value: {{min_amount_minor, ...}}"
                yield _Problem(path + ("value",), message)
            if grant.reversibility != "irreversible":
                yield _Problem(path + ("reversibility",), f"{tool} moves money irreversibly; reversibility must say so")
            if grant.value is not None and grant.value.max_amount_minor < 1:
                yield _Problem(path + ("value", "max_amount_minor"), f"{tool} moves money; its maximum must be >= 1")
            if grant.value is not None and grant.value.min_amount_minor < 1:
                yield _Problem(path + ("value", "min_amount_minor"), f"{tool} moves money; its minimum must be >= 1")
            if tool != REFUND_TOOL and m.window_ms(tool) is None:
                message = (f"{tool} is granted, so idempotency.{tool}.window_ms must be set (SPEC §4: the same amount "
                           "in a later window is a new operation)")
                yield _Problem(("idempotency", tool, "window_ms"), message, anchor=path)
            if tool == PAYOUT_TOOL and grant.payees is None:
                yield _Problem(path + ("payees",), "create_payout is granted, so payees must name the fund accounts "
                               "or contacts it may pay (ADR 0028)", anchor=path)  # fmt: skip
            if tool == PAYOUT_TOOL and m.rail.account_number is None:
                yield _Problem(("rail", "account_number"), "create_payout is granted, so rail.account_number must "
                               "name the RazorpayX account payouts are made from", anchor=path)  # fmt: skip
        elif grant.value is not None and (grant.value.min_amount_minor, grant.value.max_amount_minor) != (0, 0):
            # The seed writes {min_amount_minor: 0, max_amount_minor: 0} on a read-only grant: "moves no money".
            message = f"{tool} moves no money; its value may only say so (min_amount_minor: 0, max_amount_minor: 0)"
            yield _Problem(path + ("value",), message)
        if tool != PAYOUT_TOOL and (grant.payees is not None or grant.queue_if_low_balance):
            yield _Problem(path, f"payees and queue_if_low_balance belong to create_payout's grant, not {tool}'s")
        if grant.free_text is not None and tool not in MONEY_TOOLS:
            yield _Problem(path + ("free_text",), f"{tool} sends no money, so there is no text sent with it to bound")
        elif grant.free_text is not None and tool != PAYOUT_TOOL and (grant.free_text.fixed or
                                                                      grant.free_text.unlisted != "bounded"):
            yield _Problem(path + ("free_text",), "free_text.fixed and free_text.unlisted are about a payout's payee; "
                           f"{tool} has none")  # fmt: skip
    for tool, rule in m.idempotency.items():
        if tool not in MONEY_TOOLS:
            yield _Problem(("idempotency", tool), f"{tool} moves no money and has no idempotency window")
            continue
        if tool == REFUND_TOOL and rule.window_ms is not None:
            message = "create_refund has no window: two identical refunds are the same refund however far apart"
            yield _Problem(("idempotency", tool, "window_ms"), message)
        for index, name in enumerate(rule.key_fields or []):
            if name not in SIK_FIELDS[tool]:
                message = (f"{name!r} is not part of {tool}'s semantic idempotency key (SPEC §4), which already "
                           f"covers {', '.join(sorted(SIK_FIELDS[tool]))}; Interlock cannot key on it")
                yield _Problem(("idempotency", tool, "key_fields", index), message)
    if m.task_binding == "required" and not m.task_signers:
        yield _Problem(("task_signers",), "task_binding is required, so at least one task signer must be listed",
                       anchor=("task_binding",))
    if m.approval.hold_above_minor is not None and not m.approval.approvers:
        yield _Problem(("approval", "approvers"), "hold_above_minor is set, so someone must be listed to release holds")
    payees = payout.payees if (payout := m.grant(PAYOUT_TOOL)) is not None else None
    if payees is not None and payees.unlisted == "hold" and not m.approval.approvers:
        yield _Problem(("approval", "approvers"), "create_payout holds unlisted payees, so someone must be listed to "
                       "decide them", anchor=("scope", "grants", PAYOUT_TOOL, "payees", "unlisted"))  # fmt: skip
