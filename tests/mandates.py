"""Mandates for tests: the deploy example, with changes applied to its data."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from interlock.mandate import Mandate, validate_mandate

EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "mandate.example.yaml"
MERCHANT = "acc_DEMO000001"
AGENT = "agent_demo"


def example_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    return data


def make_mandate(changes: dict[str, Any] | None = None, *, drop: tuple[str, ...] = ()) -> Mandate:
    """The example mandate with dotted-path *changes* applied (e.g. {"approval.hold_above_minor": 10})."""
    data = copy.deepcopy(example_data())
    for dotted, value in (changes or {}).items():
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    for dotted in drop:
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node[key]
        node.pop(leaf)
    return validate_mandate(data, source="test")


def write_mandate(path: Path, changes: dict[str, Any] | None = None) -> Path:
    mandate = make_mandate(changes)
    path.write_text(yaml.safe_dump(mandate.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return path
