"""Loading mandates (SPEC §11): strict YAML (duplicate keys refused), every problem reported as
`file:line: field.path: message`, and the per-agent store the actors read from their settings."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from interlock import strict_yaml
from interlock.errors import MandateError
from interlock.mandate_model import Mandate, _Violations
from interlock.mandate_sign import (
    SIGNING_CONTEXT,
    key_id,
    load_private_key,
    read_text,
    signature_path,
    signature_problem,
)
from interlock.rail_account import account_problem, effective_account, merchants_on_account
from interlock.tools import MONEY_TOOLS

if TYPE_CHECKING:
    from interlock.config import Settings

def parse_mandate(text: str, *, source: str = "<string>") -> Mandate:
    """Validate mandate YAML *text*; every problem is reported as `source:line: field.path: message`."""
    try:
        root, data = strict_yaml.load(text, source)
    except strict_yaml.YamlProblem as exc:
        raise MandateError(str(exc)) from None
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
    mandate = parse_mandate(read_text(path, "mandate"), source=str(path))
    if pubkeys:
        problem = signature_problem(mandate, path, pubkeys)
        if problem is not None:
            raise MandateError(f"mandate {path} refused: {problem}")
    return mandate


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

    def __init__(self, mandates: Mapping[str, Mandate], sources: Mapping[str, Path] | None = None, *,
                 rail_account_id: str | None = None) -> None:  # fmt: skip
        self._mandates = dict(mandates)
        self.sources = dict(sources or {})
        # The account the configured rail key reaches (INTERLOCK_RAIL_ACCOUNT_ID; ADR 0021), and per merchant the
        # merchants that share it (per merchant and account named) — G2 counts their money in motion together.
        self.rail_account_id = rail_account_id
        self._sharing: dict[tuple[str, str | None], tuple[str, ...]] = {}
        # Hashed once: every decision and every attempt compares against it, and a hash is a full canonical dump.
        self._hashes = {agent_id: mandate.mandate_hash for agent_id, mandate in self._mandates.items()}

    @classmethod
    def load(cls, paths: list[Path], *, pubkeys: list[Path] | None = None,
             rail_account_id: str | None = None) -> MandateStore:  # fmt: skip
        mandates: dict[str, Mandate] = {}
        sources: dict[str, Path] = {}
        for path in paths:
            mandate = load_mandate(path, pubkeys=pubkeys)
            if mandate.agent_id in mandates:
                raise MandateError(
                    f"two mandates for agent_id {mandate.agent_id!r}: {sources[mandate.agent_id]} and {path}; "
                    "an agent has exactly one mandate"
                )
            if rail_account_id is not None and mandate.rail.account_id is None and _moves_money(mandate):
                # ADR 0021: once the deployment says which account its key reaches, every mandate must say which
                # account it is for — a silent "same as the key" would let a mandate written for another
                # merchant's account act on this one.
                raise MandateError(
                    f"{path}: INTERLOCK_RAIL_ACCOUNT_ID is {rail_account_id}, so this mandate must name the rail "
                    f"account it moves money on: add `rail: {{account_id: {rail_account_id}}}` if it is that one"
                )
            mandates[mandate.agent_id], sources[mandate.agent_id] = mandate, path
        return cls(mandates, sources, rail_account_id=rail_account_id)

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
        return cls.load(paths, pubkeys=_pubkeys_from(settings.mandate_pubkeys),
                        rail_account_id=settings.rail_account_id)

    def get(self, agent_id: str) -> Mandate | None:
        return self._mandates.get(agent_id)

    def hash_of(self, agent_id: str) -> str | None:
        """The mandate_hash of *agent_id*'s mandate as loaded (None: no mandate)."""
        return self._hashes.get(agent_id)

    def require(self, agent_id: str) -> Mandate:
        mandate = self._mandates.get(agent_id)
        if mandate is None:
            raise MandateError(f"no mandate for agent_id {agent_id!r}: {self.known()}")
        return mandate

    def known(self) -> str:
        """Which files were read and the agents they have mandates for, for an error that names neither."""
        if not self._mandates:
            return "no mandate is configured (set INTERLOCK_MANDATE to a file or INTERLOCK_MANDATE_DIR to a directory)"
        files = sorted({str(path) for path in self.sources.values()})
        agents = ", ".join(sorted(self._mandates))
        return f"the mandates read ({', '.join(files) or 'given in code'}) are for {agents}"

    def account_problem(self, mandate: Mandate) -> dict[str, Any] | None:
        """Why *mandate*'s money may not move with this deployment's credentials (G1_RAIL_ACCOUNT_MISMATCH)."""
        return account_problem(mandate, self.rail_account_id)

    def account_merchants(self, mandate: Mandate) -> tuple[str, ...]:
        """The merchants on *mandate*'s rail account, whose money in motion G2 counts together. Remembered per
        (merchant, account the mandate names), never per merchant alone: a merchant's mandate naming another account
        (refused at G1, but asked first) would otherwise leave its legitimate mandates counting only itself (finding
        F-acct-1: a payout admitted against a balance another merchant's payout had already taken)."""
        key = (mandate.merchant_id, effective_account(mandate, self.rail_account_id))
        shared = self._sharing.get(key)
        if shared is None:
            shared = merchants_on_account(self._mandates.values(), mandate, self.rail_account_id)
            self._sharing[key] = shared
        return shared

    def as_dict(self) -> dict[str, Mandate]:
        return dict(self._mandates)

    def __len__(self) -> int:
        return len(self._mandates)


def load_mandates_from_settings(settings: Settings) -> dict[str, Mandate]:
    return MandateStore.from_settings(settings).as_dict()


def _moves_money(mandate: Mandate) -> bool:
    return any(tool in MONEY_TOOLS for tool in mandate.scope.grants)


def _pubkeys_from(value: str | None) -> list[Path]:
    keys = [Path(part.strip()) for part in (value or "").split(",") if part.strip()]
    for key in keys:
        if not key.is_file():
            raise MandateError(f"INTERLOCK_MANDATE_PUBKEYS names {key}, which does not exist")
    return keys


# Signing and verifying a mandate *file*: each loads it first (interlock.mandate_sign knows keys and bytes only).
def sign_mandate(mandate_path: Path, private_key_path: Path) -> Path:
    """Sign the validated mandate's canonical bytes; writes and returns `<mandate>.sig` (JSON)."""
    mandate = load_mandate(mandate_path)
    key = load_private_key(private_key_path)
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
