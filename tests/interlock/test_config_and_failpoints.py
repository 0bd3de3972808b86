from __future__ import annotations

import subprocess
import sys

import pytest

from interlock.config import load_settings
from interlock.errors import ConfigError
from interlock.failpoints import failpoint


def test_missing_required_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTERLOCK_RAIL_URL", raising=False)
    with pytest.raises(ConfigError, match="INTERLOCK_RAIL_URL is not set") as info:
        load_settings().require("rail_url")
    assert info.value.variable == "INTERLOCK_RAIL_URL"


def test_malformed_setting_names_the_variable_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLOCK_RECONCILE_MIN_DELAY_MS", "2s")
    with pytest.raises(ConfigError, match=r"INTERLOCK_RECONCILE_MIN_DELAY_MS.*'2s'"):
        load_settings()


def test_defaults_and_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTERLOCK_RECONCILE_MIN_DELAY_MS", raising=False)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/0")
    settings = load_settings()
    assert settings.reconcile_min_delay_ms == 2000
    assert settings.redis_url == "redis://127.0.0.1:6390/0"


def test_the_ingress_limits_have_their_documented_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    assert (settings.agent_max_money_calls, settings.ingress_max_money_calls, settings.agent_max_other_calls) == (
        64, 256, 16)  # fmt: skip
    assert (settings.http_max_connections, settings.http_header_timeout_ms, settings.http_body_timeout_ms) == (
        400, 10_000, 15_000)  # fmt: skip
    assert (settings.http_max_sessions, settings.http_agent_max_sessions, settings.http_session_idle_ms) == (
        1024, 8, 120_000)  # fmt: skip


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"INTERLOCK_AGENT_MAX_MONEY_CALLS": "150"}, "INTERLOCK_AGENT_MAX_MONEY_CALLS=150"),
        ({"INTERLOCK_INGRESS_MAX_MONEY_CALLS": "100"}, "INTERLOCK_INGRESS_MAX_MONEY_CALLS=100"),
        ({"INTERLOCK_HTTP_AGENT_MAX_SESSIONS": "600"}, "INTERLOCK_HTTP_MAX_SESSIONS=1024"),
        ({"INTERLOCK_HTTP_HEADER_TIMEOUT_MS": "0"}, "INTERLOCK_HTTP_HEADER_TIMEOUT_MS"),
        ({"INTERLOCK_HTTP_MAX_CONNECTIONS": "lots"}, "INTERLOCK_HTTP_MAX_CONNECTIONS"),
        ({"INTERLOCK_AGENT_MAX_OTHER_CALLS": "64"}, "INTERLOCK_AGENT_MAX_OTHER_CALLS"),
    ],
)
def test_an_ingress_limit_that_lets_one_agent_take_everything_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert named in str(refused.value)


def test_failpoint_is_a_no_op_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLOCK_KILL_AT", "rail.before_wal")
    failpoint("rail.after_wal_before_call")  # a different point: nothing happens
    with pytest.raises(ValueError, match="unknown failpoint"):
        failpoint("rail.nowhere")


def test_failpoint_sigkills_its_own_process() -> None:
    code = "from interlock.failpoints import failpoint\nfailpoint('rail.before_wal')\nprint('survived')"
    env = {"INTERLOCK_KILL_AT": "rail.before_wal", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == -9
    assert "survived" not in result.stdout
    assert "failpoint rail.before_wal" in result.stderr
