"""The mandate (SPEC §11): the human-approved YAML that is the single source of runtime permission.

Validation is strict — unknown keys, floats, booleans or strings where an integer belongs, and missing
fields are errors naming the field path and, for YAML, the line. `mandate_hash` is the sha256 of the
canonical JSON (RFC 8785) of the *validated* mandate, dumped in JSON mode with every default filled in:
comments, key order, quoting and YAML style do not change it; any value does. An Ed25519 detached
signature (`<mandate>.sig`) signs exactly those canonical bytes, prefixed with SIGNING_CONTEXT.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from interlock.canonical import canonical_json, sha256_hex
from interlock.errors import MandateError
from interlock.tools import MONEY_TOOLS, TOOLS

if TYPE_CHECKING:
    from interlock.config import Settings

SIGNING_CONTEXT = b"interlock-mandate-v1\n"  # domain separation: a mandate key signs nothing else
SIGNATURE_SUFFIX = ".sig"
REFUND_TOOL = "create_refund"  # the one money tool without an idempotency window (SPEC §4)


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
PinnedToolName = Annotated[str, _check(r"[A-Za-z0-9_.-]{1,128}", "an MCP tool name")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ValueLimit(_Strict):
    min_amount_minor: Minor
    max_amount_minor: Minor
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


class Grant(_Strict):
    reversibility: Literal["reversible", "irreversible"]
    value: ValueLimit | None = None


class Scope(_Strict):
    grants: dict[ToolName, Grant] = Field(min_length=1)


class Window(_Strict):
    """A sliding window over the money calls of this mandate (G3)."""

    window_ms: Millis
    max_calls: Minor | None = None
    max_amount_minor: Minor | None = None
    currency: Currency | None = None

    @model_validator(mode="after")
    def _rules(self) -> Window:
        if self.max_calls is None and self.max_amount_minor is None:
            raise _Violations([_Problem(("max_calls",), "a window needs max_calls, max_amount_minor or both")])
        if self.max_amount_minor is not None and self.currency is None:
            raise _Violations([_Problem(("currency",), "max_amount_minor needs the currency it counts")])
        return self


class FeeBudget(_Strict):
    window_ms: Millis
    max_fee_minor: NonNegativeMinor


class Limits(_Strict):
    windows: list[Window] = Field(default_factory=list)
    fee_budgets: dict[Currency, FeeBudget] = Field(default_factory=dict)


class IdempotencyRule(_Strict):
    window_ms: Millis | None = None


class Approval(_Strict):
    approvers: list[Approver] = Field(default_factory=list)
    hold_above_minor: Minor | None = None
    hold_expiry_ms: Millis = 86_400_000


class Pin(_Strict):
    sha256: Sha256Hex


class Provenance(_Strict):
    server_id: str | None = None
    # Keys are not restricted to Interlock's own tools: in proxy mode upstream tools are pinned too.
    pinned_manifests: dict[PinnedToolName, Pin] = Field(default_factory=dict)


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

    @model_validator(mode="after")
    def _rules(self) -> Mandate:
        problems = list(_mandate_problems(self))
        if problems:
            raise _Violations(problems)
        return self

    @property
    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical JSON of the validated mandate (defaults filled in): what is hashed and signed."""
        return canonical_json(self.model_dump(mode="json"))

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
            if tool != REFUND_TOOL and m.window_ms(tool) is None:
                message = (f"{tool} is granted, so idempotency.{tool}.window_ms must be set (SPEC §4: the same amount "
                           "in a later window is a new operation)")
                yield _Problem(("idempotency", tool, "window_ms"), message, anchor=path)
        elif grant.value is not None:
            yield _Problem(path + ("value",), f"{tool} moves no money; a value limit on it would be meaningless")
    for tool, rule in m.idempotency.items():
        if tool not in MONEY_TOOLS:
            yield _Problem(("idempotency", tool), f"{tool} moves no money and has no idempotency window")
        elif tool == REFUND_TOOL and rule.window_ms is not None:
            message = "create_refund has no window: two identical refunds are the same refund however far apart"
            yield _Problem(("idempotency", tool, "window_ms"), message)
    if m.approval.hold_above_minor is not None and not m.approval.approvers:
        yield _Problem(("approval", "approvers"), "hold_above_minor is set, so someone must be listed to release holds")


# -- loading -----------------------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: a reviewer must never read one value while another applies."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if key in seen:
                raise MandateError(f"{self.name}:{line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_mandate(text: str, *, source: str = "<string>") -> Mandate:
    """Validate mandate YAML *text*; every problem is reported as `source:line: field.path: message`."""
    loader = _Loader(text)
    loader.name = source
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise MandateError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]
    if not isinstance(data, dict):
        raise MandateError(f"{source}: a mandate is a YAML mapping (v: 1, mandate_id: ...), got {type(data).__name__}")
    return validate_mandate(data, source=source, root=root)


def validate_mandate(data: Mapping[str, Any], *, source: str = "<mandate>", root: yaml.Node | None = None) -> Mandate:
    """Validate already-parsed mandate data; *root* (the composed YAML) lets errors name lines."""
    try:
        return Mandate.model_validate(data)
    except ValidationError as exc:
        problems = list(_describe(exc, source, root))
        head = f"invalid mandate {source}: " + ("1 problem" if len(problems) == 1 else f"{len(problems)} problems")
        raise MandateError(head + "\n  " + "\n  ".join(problems)) from None


def load_mandate(path: Path, *, pubkeys: list[Path] | None = None) -> Mandate:
    """Load and validate the mandate at *path*; with *pubkeys*, also require a valid `<path>.sig`."""
    mandate = parse_mandate(_read(path, "mandate"), source=str(path))
    if pubkeys:
        problem = signature_problem(mandate, path, pubkeys)
        if problem is not None:
            raise MandateError(f"mandate {path} refused: {problem}")
    return mandate


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MandateError(f"{what} file {path} does not exist") from None
    except OSError as exc:
        raise MandateError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise MandateError(f"{what} file {path} is not UTF-8 text") from None


def _describe(exc: ValidationError, source: str, root: yaml.Node | None) -> Iterator[str]:
    for err in exc.errors():
        loc = tuple(err["loc"])
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _Violations):
            for problem in cause.problems:
                anchor = loc + problem.anchor if problem.anchor is not None else None
                yield _where(source, root, loc + problem.path, anchor) + problem.message
        else:
            yield _where(source, root, loc) + _message(err)


def _message(err: Any) -> str:
    kind, value = err["type"], err.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown key (not part of the mandate schema)"
    if kind == "int_type":
        return f"must be an integer (minor units or milliseconds; no floats, booleans or strings), got {value!r}"
    if kind == "value_error":
        return str(err["msg"]).removeprefix("Value error, ")
    if isinstance(value, dict | list):
        return str(err["msg"])
    return f"{err['msg']}, got {value!r}"


def _where(source: str, root: yaml.Node | None, loc: tuple[Any, ...], anchor: tuple[Any, ...] | None = None) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc if p != "[key]").lstrip(".")
    line = _line_of(root, loc, exact=anchor is not None) or _line_of(root, anchor or loc)
    return f"{source}:{line}: {path or '(top level)'}: " if line is not None else f"{source}: {path}: "


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...], *, exact: bool = False) -> int | None:
    """Line of the deepest YAML key on *loc*: the field itself, or its parent when the field is missing
    (None then, when *exact*)."""
    if root is None:
        return None
    node, line = root, root.start_mark.line + 1
    for part in (p for p in loc if p != "[key]"):
        if isinstance(node, yaml.MappingNode):
            keys = (kv for kv in node.value if isinstance(kv[0], yaml.ScalarNode) and kv[0].value == str(part))
            match = next(keys, None)
            if match is None:
                return None if exact else line
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return None if exact else line
    return line


# -- several mandates, one per agent ---------------------------------------------------------------------------


class MandateStore:
    """The configured mandates keyed by agent_id, with the file each came from."""

    def __init__(self, mandates: Mapping[str, Mandate], sources: Mapping[str, Path] | None = None) -> None:
        self._mandates = dict(mandates)
        self.sources = dict(sources or {})

    @classmethod
    def load(cls, paths: list[Path], *, pubkeys: list[Path] | None = None) -> MandateStore:
        mandates: dict[str, Mandate] = {}
        sources: dict[str, Path] = {}
        for path in paths:
            mandate = load_mandate(path, pubkeys=pubkeys)
            if mandate.agent_id in mandates:
                raise MandateError(
                    f"two mandates for agent_id {mandate.agent_id!r}: {sources[mandate.agent_id]} and {path}; "
                    "an agent has exactly one mandate"
                )
            mandates[mandate.agent_id], sources[mandate.agent_id] = mandate, path
        return cls(mandates, sources)

    @classmethod
    def from_settings(cls, settings: Settings) -> MandateStore:
        """Mandates from INTERLOCK_MANDATE (one file) and/or INTERLOCK_MANDATE_DIR (every *.yaml / *.yml)."""
        paths: list[Path] = []
        if settings.mandate is not None:
            if not settings.mandate.is_file():
                raise MandateError(f"INTERLOCK_MANDATE={settings.mandate}: no such mandate file")
            paths.append(settings.mandate)
        if settings.mandate_dir is not None:
            if not settings.mandate_dir.is_dir():
                raise MandateError(f"INTERLOCK_MANDATE_DIR={settings.mandate_dir}: no such directory")
            found = sorted(p for p in settings.mandate_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
            if not found:
                raise MandateError(f"INTERLOCK_MANDATE_DIR={settings.mandate_dir}: holds no *.yaml mandate")
            paths.extend(found)
        if not paths:
            raise MandateError("no mandate configured: set INTERLOCK_MANDATE (a file) or INTERLOCK_MANDATE_DIR")
        return cls.load(paths, pubkeys=_pubkeys_from(settings.mandate_pubkeys))

    def get(self, agent_id: str) -> Mandate | None:
        return self._mandates.get(agent_id)

    def require(self, agent_id: str) -> Mandate:
        mandate = self._mandates.get(agent_id)
        if mandate is None:
            raise MandateError(f"no mandate for agent_id {agent_id!r}")
        return mandate

    def as_dict(self) -> dict[str, Mandate]:
        return dict(self._mandates)

    def __len__(self) -> int:
        return len(self._mandates)


def load_mandates_from_settings(settings: Settings) -> dict[str, Mandate]:
    return MandateStore.from_settings(settings).as_dict()


def _pubkeys_from(value: str | None) -> list[Path]:
    keys = [Path(part.strip()) for part in (value or "").split(",") if part.strip()]
    for key in keys:
        if not key.is_file():
            raise MandateError(f"INTERLOCK_MANDATE_PUBKEYS names {key}, which does not exist")
    return keys


# -- Ed25519 signatures ----------------------------------------------------------------------------------------


def signature_path(mandate_path: Path) -> Path:
    return mandate_path.with_name(mandate_path.name + SIGNATURE_SUFFIX)


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_hex(raw)[:16]


def generate_keypair(private_path: Path, public_path: Path) -> None:
    """Write a new Ed25519 key pair as PEM; the private key is created 0600 and nothing is overwritten."""
    for path in (private_path, public_path):
        if path.exists():
            raise MandateError(f"{path} already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    public_path.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def sign_mandate(mandate_path: Path, private_key_path: Path) -> Path:
    """Sign the validated mandate's canonical bytes; writes and returns `<mandate>.sig` (JSON)."""
    mandate = load_mandate(mandate_path)
    key = _load_private_key(private_key_path)
    signature = key.sign(SIGNING_CONTEXT + mandate.canonical_bytes)
    record = {
        "v": 1,
        "alg": "Ed25519",
        "key_id": key_id(key.public_key()),
        "mandate_hash": mandate.mandate_hash,  # informative only: verification recomputes the message
        "signature": base64.b64encode(signature).decode("ascii"),
    }
    out = signature_path(mandate_path)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def verify_mandate_signature(mandate_path: Path, public_key_paths: list[Path]) -> bool:
    """True when `<mandate>.sig` is a valid signature of the mandate by one of the given public keys."""
    return signature_problem(load_mandate(mandate_path), mandate_path, public_key_paths) is None


def signature_problem(mandate: Mandate, mandate_path: Path, public_key_paths: list[Path]) -> str | None:
    """Why the signature of *mandate* (loaded from *mandate_path*) does not verify, or None when it does."""
    sig_path = signature_path(mandate_path)
    if not sig_path.exists():
        return f"it is unsigned: signing keys are configured but {sig_path} does not exist"
    try:
        record = json.loads(_read(sig_path, "signature"))
        signature = base64.b64decode(record["signature"], validate=True)
    except (ValueError, KeyError, TypeError):
        return f"{sig_path} is not an Interlock mandate signature"
    keys = [_load_public_key(path) for path in public_key_paths]
    for key in keys:
        try:
            key.verify(signature, SIGNING_CONTEXT + mandate.canonical_bytes)
            return None
        except InvalidSignature:
            continue
    signed_hash = record.get("mandate_hash")
    if isinstance(signed_hash, str) and signed_hash != mandate.mandate_hash:
        return (f"bad signature: {sig_path} was made for mandate_hash {signed_hash}, but the mandate now hashes to "
                f"{mandate.mandate_hash} (edited after signing?)")
    tried = ", ".join(map(str, public_key_paths))
    return f"bad signature: {sig_path} does not verify with any configured key ({tried})"


def _load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(_read(path, "private key").encode("ascii"), password=None)
    except (ValueError, TypeError) as exc:
        raise MandateError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise MandateError(f"{path} is not an Ed25519 private key")
    return key


def _load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(_read(path, "public key").encode("ascii"))
    except ValueError as exc:
        raise MandateError(f"{path} is not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise MandateError(f"{path} is not an Ed25519 public key")
    return key
