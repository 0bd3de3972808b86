"""`interlock token new`, the tokens file, and the ingress refusing to start on bad configuration."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ingress.tokens import TokenTable, token_sha256
from interlock.errors import ConfigError
from tests.ingress.helpers import CLI, INGRESS_CMD, REPO


def test_token_new_prints_a_token_whose_sha256_is_the_line_to_add() -> None:
    proc = subprocess.run([*CLI, "token", "new", "agent_demo"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    token = re.search(r"^token: (\S+)$", proc.stdout, re.MULTILINE)
    assert token is not None
    entry_line = proc.stdout.strip().splitlines()[-1]
    entry = yaml.safe_load(entry_line)
    digest = entry["agents"]["agent_demo"]["token_sha256"]
    assert digest == hashlib.sha256(token.group(1).encode("utf-8")).hexdigest()
    assert len(token.group(1)) >= 43  # 32 random bytes, url-safe base64
    # The printed line is itself a valid tokens file that authenticates the printed token.
    assert TokenTable.parse(entry).agent_for(token.group(1)) == "agent_demo"


def test_token_new_gives_a_different_token_each_time() -> None:
    outputs = {
        subprocess.run(
            [*CLI, "token", "new", "a1"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
        ).stdout  # fmt: skip
        for _ in range(2)
    }
    assert len(outputs) == 2


def test_the_token_table_maps_only_exact_tokens_to_agents() -> None:
    table = TokenTable.parse({"agents": {"a1": {"token_sha256": token_sha256("t-one")},
                                         "a2": {"token_sha256": token_sha256("t-two")}}})  # fmt: skip
    assert table.agent_for("t-one") == "a1"
    assert table.agent_for("t-two") == "a2"
    assert table.agent_for("t-one ") is None
    assert table.agent_for("") is None
    assert table.agent_for(token_sha256("t-one")) is None  # the stored hash is not a token


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"agents": {}},
        {"agents": {"a1": {"token": "plaintext"}}},
        {"agents": {"a1": {"token_sha256": "ABC"}}},
        {"agents": {"a1": {"token_sha256": "A" * 64}}},  # upper-case hex is not the documented form
        {"agents": {"bad id": {"token_sha256": "a" * 64}}},
        {"agents": {"a1": {"token_sha256": "a" * 64}}, "extra": 1},
    ],
)
def test_a_malformed_tokens_file_is_a_config_error(data: object) -> None:
    with pytest.raises(ConfigError):
        TokenTable.parse(data)


def test_an_agent_listed_twice_in_the_tokens_file_is_refused_naming_the_line(tmp_path: Path) -> None:
    # PyYAML keeps the last entry: the reviewed first token would silently stop working and the second,
    # perhaps someone else's, would authenticate as this agent.
    path = tmp_path / "tokens.yaml"
    path.write_text("agents:\n"
                    f"  a1: {{token_sha256: {token_sha256('t-reviewed')}}}\n"
                    f"  a2: {{token_sha256: {token_sha256('t-two')}}}\n"
                    f"  a1: {{token_sha256: {token_sha256('t-other')}}}\n")  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        TokenTable.load(path)
    assert refused.value.variable == "INTERLOCK_AGENT_TOKENS"
    assert f"{path}:4" in str(refused.value) and "duplicate key 'a1'" in str(refused.value)


def test_a_tokens_file_that_is_not_yaml_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("agents: {a1: [\n")
    with pytest.raises(ConfigError) as refused:
        TokenTable.load(path)
    assert str(path) in str(refused.value) and "not valid YAML" in str(refused.value)


def test_the_stdio_ingress_refuses_to_start_for_an_agent_without_a_mandate(env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*INGRESS_CMD, "--stdio"],
        env={**env, "INTERLOCK_AGENT_ID": "agent_nobody", "PATH": "/usr/bin:/bin"},
        cwd=REPO, input="", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "agent_nobody" in proc.stderr
    assert proc.stdout == ""


def test_the_stdio_ingress_needs_an_agent_id(env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if k != "INTERLOCK_AGENT_ID"}
    proc = subprocess.run([*INGRESS_CMD, "--stdio"], env={**env, "PATH": "/usr/bin:/bin"}, cwd=REPO, input="",
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert "INTERLOCK_AGENT_ID" in proc.stderr
    assert proc.stdout == ""
