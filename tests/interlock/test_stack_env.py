"""The settings `interlock up` keeps for an operator's commands (interlock/stack_env.py, issue 48 item 1): what is
kept, who may read it, and that a variable set in the environment wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli import OPERATOR_COMMANDS, cli
from interlock.stack_env import fill_from_stack, read_stack_env, stack_env_file, write_stack_env

ENV = {"INTERLOCK_LEDGER": "/srv/data/ledger.sqlite3", "REDIS_URL": "redis://127.0.0.1:8790/0",
       "INTERLOCK_RAIL_KEY_SECRET": "s3cret=with=equals", "PATH": "/usr/bin", "PYTHONUNBUFFERED": "1",
       "NO_PROXY": "127.0.0.1,localhost"}  # fmt: skip


def test_the_stack_settings_are_kept_for_their_owner_only_and_read_back(tmp_path: Path) -> None:
    path = stack_env_file(tmp_path)
    path.write_text("old", encoding="utf-8")
    path.chmod(0o644)
    write_stack_env(path, ENV)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_stack_env(path) == {k: v for k, v in ENV.items() if k not in ("PATH", "PYTHONUNBUFFERED")}
    assert stack_env_file(tmp_path, "s1").name == "stack-s1.env"
    assert read_stack_env(tmp_path / "nothing.env") == {}


def test_a_variable_set_in_the_environment_wins(tmp_path: Path) -> None:
    write_stack_env(stack_env_file(tmp_path), ENV)
    environ = {"INTERLOCK_LEDGER": "/elsewhere/ledger.sqlite3"}
    assert fill_from_stack(environ, tmp_path) == stack_env_file(tmp_path)
    assert environ["INTERLOCK_LEDGER"] == "/elsewhere/ledger.sqlite3"
    assert environ["REDIS_URL"] == ENV["REDIS_URL"] and environ["INTERLOCK_RAIL_KEY_SECRET"] == "s3cret=with=equals"
    assert fill_from_stack({}, tmp_path / "no-stack") is None


def test_an_operators_command_reads_the_stack_and_an_actor_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`interlock status` with nothing exported names the ledger of the stack in --data; the actors (and `up`)
    are given their environment and never read it."""
    ledger = tmp_path / "ledger.sqlite3"  # named, not created: status says it does not exist
    write_stack_env(stack_env_file(tmp_path), {"INTERLOCK_LEDGER": str(ledger)})
    environ = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_LEDGER", "REDIS_URL")}
    monkeypatch.setattr(os, "environ", environ)  # what the command fills in stays in this test
    result = CliRunner().invoke(cli, ["--data", str(tmp_path), "status"])
    said = result.output + str(result.exception)
    assert "INTERLOCK_LEDGER is not set" not in said and f"ledger {ledger} does not exist" in said
    assert environ["INTERLOCK_LEDGER"] == str(ledger)
    # Without the stack's file, the command says what is missing, as before.
    environ.pop("INTERLOCK_LEDGER")
    result = CliRunner().invoke(cli, ["--data", str(tmp_path / "elsewhere"), "status"])
    assert "INTERLOCK_LEDGER is not set" in result.output + str(result.exception)
    assert {"status", "holds", "quarantine", "attention", "audit"} <= OPERATOR_COMMANDS
    assert not {"gate-worker", "rail-worker", "reconciler", "ingress", "webhooks", "up"} & OPERATOR_COMMANDS
