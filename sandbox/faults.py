"""Fault profiles: seeded, switchable at run time, each with a rate in [0, 1] and a scope.

A profile fires on a request with probability `rate`, drawn from one `random.Random(seed)` so a
run with the same seed and the same request order fires the same faults. `deep_page` is the one
exception: it is decided per payment (a hash of seed and payment id), because a list whose order
changed between two page requests would hide entities from an honest pager — something no real
rail does, and which would make the sandbox, not Interlock, lose refunds.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger(__name__)

Scope = Literal["money", "reads", "webhooks", "lifecycle", "all"]
Kind = Literal["money", "reads", "webhooks", "lifecycle"]

# name -> (default scope, {param: default}). Anything else in a profile is refused.
PROFILES: dict[str, tuple[Scope, dict[str, Any]]] = {
    "ambiguous_504": ("money", {"html": 0.5}),
    "fail_504": ("money", {"html": 0.5}),
    "slow": ("money", {"delay_ms": 3000}),
    "dup_response": ("money", {}),
    "partition": ("all", {"duration_ms": 1000, "mode": "reset"}),
    "replica_lag": ("reads", {"lag_ms": 2000}),
    "deep_page": ("reads", {"newest": 1}),
    # Webhook deliveries (sandbox/webhooks.py), drawn once per event as it is emitted.
    "webhook_drop": ("webhooks", {}),
    "webhook_duplicate": ("webhooks", {}),
    "webhook_delay": ("webhooks", {"delay_ms": 5000}),
    "webhook_bad_signature": ("webhooks", {}),
    # The lifecycle after the call (sandbox/lifecycle.py, with --lifecycle-ms), drawn once per entity as it is created.
    "refund_bank_failure": ("lifecycle", {}),
    "refund_pending_long": ("lifecycle", {"hold_ms": 60000}),
    "settlement_partial": ("lifecycle", {}),
    "settlement_reversed": ("lifecycle", {}),
    "payout_failed": ("lifecycle", {}),
    "payout_reversed": ("lifecycle", {}),
}
PARTITION_MODES = ("reset", "hang")


class FaultConfigError(ValueError):
    """Raised when a fault profile is unknown or malformed; the message names the problem."""


@dataclass(frozen=True)
class Fault:
    name: str
    rate: float
    scope: Scope
    params: dict[str, Any] = field(default_factory=dict)

    def param(self, name: str) -> Any:
        return self.params.get(name, PROFILES[self.name][1][name])

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rate": self.rate, "scope": self.scope, "params": dict(self.params)}


def parse_fault(spec: Mapping[str, Any]) -> Fault:
    """Validate one profile given as {name, rate, scope?, params?}."""
    if not isinstance(spec, Mapping):
        raise FaultConfigError(f"a fault profile must be an object, got {spec!r}")
    unknown = set(spec) - {"name", "rate", "scope", "params"}
    if unknown:
        raise FaultConfigError(f"unknown fault profile keys: {sorted(unknown)}")
    name = spec.get("name")
    if name not in PROFILES:
        raise FaultConfigError(f"unknown fault {name!r}; known: {sorted(PROFILES)}")
    rate = spec.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        raise FaultConfigError(f"fault {name}: rate must be a number in [0, 1], got {rate!r}")
    default_scope, defaults = PROFILES[name]
    scope = spec.get("scope", default_scope)
    if scope not in ("money", "reads", "webhooks", "lifecycle", "all"):
        raise FaultConfigError(f"fault {name}: scope must be money, reads, webhooks, lifecycle or all, got {scope!r}")
    params = dict(spec.get("params") or {})
    unknown = set(params) - set(defaults)
    if unknown:
        raise FaultConfigError(f"fault {name}: unknown params {sorted(unknown)}; known: {sorted(defaults)}")
    for key, value in params.items():
        if key == "mode":
            if value not in PARTITION_MODES:
                raise FaultConfigError(f"fault {name}: mode must be one of {PARTITION_MODES}, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise FaultConfigError(f"fault {name}: param {key} must be a non-negative number, got {value!r}")
    return Fault(name=name, rate=float(rate), scope=scope, params=params)


def parse_cli_fault(text: str) -> dict[str, Any]:
    """Parse `NAME=RATE[,param=value...][,scope=S]`, e.g. `slow=1,delay_ms=3000`, into a profile dict."""
    head, _, rest = text.partition(",")
    name, eq, rate_text = head.partition("=")
    if not eq:
        raise FaultConfigError(f"--fault expects NAME=RATE[,param=value...], got {text!r}")
    try:
        rate = float(rate_text)
    except ValueError:
        raise FaultConfigError(f"--fault {name}: rate {rate_text!r} is not a number") from None
    spec: dict[str, Any] = {"name": name.strip(), "rate": rate, "params": {}}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise FaultConfigError(f"--fault {name}: expected param=value, got {item!r}")
        if key == "scope":
            spec["scope"] = value
        else:
            spec["params"][key] = _number_or_text(value)
    parse_fault(spec)
    return spec


def _number_or_text(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            continue
    return value


class FaultSet:
    """The active profiles of one sandbox process and the seeded generator that fires them."""

    def __init__(self, faults: Sequence[Fault] = (), seed: int = 0) -> None:
        self.faults: list[Fault] = []
        self.seed = seed
        self.rng = random.Random(seed)
        self.partition_until = 0.0
        self.partition_mode = "reset"
        self.configure(faults, seed)

    def configure(self, faults: Sequence[Fault], seed: int | None = None) -> None:
        if seed is not None:
            self.seed = seed
            self.rng = random.Random(seed)
        self.faults = list(faults)
        if not any(f.name == "partition" for f in self.faults):
            self.partition_until = 0.0
        logger.info("fault profiles now %s (seed %s)", [f.as_dict() for f in self.faults], self.seed)

    def describe(self) -> dict[str, Any]:
        remaining = max(0.0, self.partition_until - time.monotonic())
        return {
            "seed": self.seed,
            "faults": [f.as_dict() for f in self.faults],
            "partition_remaining_ms": int(remaining * 1000),
        }

    def draw(self, name: str, kind: Kind) -> Fault | None:
        """The first profile called *name* in scope for *kind* that fires on this request, if any."""
        for fault in self.faults:
            if fault.name == name and fault.scope in (kind, "all") and self.rng.random() < fault.rate:
                return fault
        return None

    def chance(self, probability: float) -> bool:
        return self.rng.random() < probability

    def partition_drop(self, kind: Kind) -> str | None:
        """The mode ("reset" | "hang") if this request falls inside a partition, starting one if it fires."""
        now = time.monotonic()
        if now < self.partition_until:
            return self.partition_mode
        fault = self.draw("partition", kind)
        if fault is None:
            return None
        self.partition_until = now + fault.param("duration_ms") / 1000
        self.partition_mode = fault.param("mode")
        logger.warning("partition started for %s ms (mode %s)", fault.param("duration_ms"), self.partition_mode)
        return self.partition_mode

    def partition_remaining(self) -> float:
        return max(0.0, self.partition_until - time.monotonic())

    def deep_page(self, list_key: str) -> int:
        """How many newest entities the list *list_key* moves to its end (0 when deep_page does not apply)."""
        for fault in self.faults:
            if fault.name != "deep_page" or fault.scope == "money":
                continue
            digest = hashlib.sha256(f"{self.seed}:{list_key}".encode()).digest()
            if int.from_bytes(digest[:8], "big") / 2**64 < fault.rate:
                return int(fault.param("newest"))
        return 0
