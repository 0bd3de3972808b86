"""The profile bench's attribution (cost centres, a standard-library function charged to its caller) and the
actors' profiling hook on a real process."""

from __future__ import annotations

import marshal
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench.perf_profile import OTHER, ProcessProfile, add_stats, centre_of
from interlock.profiling import PROFILE_ENV, PROFILE_SIGNAL, profile_path
from interlock.results import REPO

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"


def test_functions_are_charged_by_the_file_they_live_in() -> None:
    assert centre_of(f"{SITE}/redis/client.py", "Redis.execute_command") == "redis-py"
    assert centre_of(f"{SITE}/httpcore/_sync/http11.py", "handle_request").startswith("the rail's HTTP client")
    assert centre_of(f"{REPO}/rails/wire.py", "Wire.exchange").startswith("the rail's HTTP client")
    assert centre_of(f"{STDLIB}/http/client.py", "HTTPResponse.begin").startswith("the rail's HTTP client")
    assert centre_of(f"{SITE}/mcp/server/runner.py", "serve_one").startswith("MCP SDK")
    assert centre_of(f"{REPO}/ledger/intents.py", "transition").startswith("Interlock: ledger")
    assert centre_of(f"{REPO}/rail_worker/execute.py", "complete") == "Interlock: rail worker"
    assert centre_of(f"{REPO}/.venv/lib/python3.11/site-packages/click/core.py", "main") == "other libraries"
    assert centre_of("builtins", "<method 'execute' of 'sqlite3.Connection' objects>").startswith("SQLite")
    assert centre_of("builtins", "<method 'sendall' of '_socket.socket' objects>").startswith("sockets")
    assert centre_of("builtins", "isinstance") == OTHER
    assert centre_of(f"{STDLIB}/typing.py", "_get_protocol_attrs") == OTHER


def test_a_standard_library_function_is_charged_to_its_callers_by_their_time_in_it(tmp_path: Path) -> None:
    redis_call = (f"{SITE}/redis/client.py", 10, "Redis.execute_command")
    ledger_call = (f"{REPO}/ledger/intents.py", 20, "transition")
    check = ("builtins", 0, "isinstance")
    sql = ("builtins", 0, "<method 'execute' of 'sqlite3.Connection' objects>")
    # pstats: key -> (calls, primitive calls, own s, cumulative s, {caller: (calls, primitive, own s, cumulative s)})
    stats = {
        redis_call: (1, 1, 1.0, 4.0, {}),
        ledger_call: (1, 1, 2.0, 6.0, {}),
        check: (4, 4, 4.0, 4.0, {redis_call: (3, 3, 3.0, 3.0), ledger_call: (1, 1, 1.0, 1.0)}),
        sql: (1, 1, 3.0, 3.0, {ledger_call: (1, 1, 3.0, 3.0)}),
    }
    path = tmp_path / "p.pstat"
    path.write_bytes(marshal.dumps(stats))
    profile = ProcessProfile("rail", cpu_ms_per_call=10.0)
    add_stats(profile, path)
    assert profile.own_s == Counter({"redis-py": 4.0, "Interlock: ledger (SQL, state machine, audit chain)": 3.0,
                                     "SQLite (statements, commits, fsync)": 3.0})  # fmt: skip
    assert profile.ms("redis-py") == 4.0  # 40% of the process's 10 ms per call
    assert profile.functions["builtins:0 isinstance"] == 4.0


def test_an_actor_writes_its_profile_when_signalled_and_starts_afresh(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {**os.environ, PROFILE_ENV: str(tmp_path / "profiles")}
    actor = subprocess.Popen([sys.executable, "-m", "interlock.cli", "sandbox", "--port", "0", "--data",
                              str(tmp_path / "sandbox"), "--ready-file", str(ready)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), "the sandbox did not start"
        for n in (1, 2):
            os.kill(actor.pid, PROFILE_SIGNAL)
            path = profile_path(tmp_path / "profiles", actor.pid, n)
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert path.exists(), f"no profile {n}"
        time.sleep(0.5)
        profile = ProcessProfile("sandbox", cpu_ms_per_call=1.0)
        add_stats(profile, profile_path(tmp_path / "profiles", actor.pid, 1))
        assert profile.total_s > 0  # the start-up's imports, at least
    finally:
        actor.send_signal(signal.SIGKILL)
        actor.wait(10)


def test_the_calibration_measures_each_client_against_a_real_rail_and_redis(rail_sandbox, redis_server) -> None:  # type: ignore[no-untyped-def]
    from bench.perf_profile import Calibration, _calibration_lines, calibrate

    rail_sandbox.add_payment("pay_calibrate01", 189900)
    c = calibrate(rail_sandbox.url, rail_sandbox.key_id, rail_sandbox.key_secret, "pay_calibrate01", redis_server.url,
                  n=20)  # fmt: skip
    assert c.rail_read_us > 0 and c.stdlib_read_us > 0 and c.redis_get_us > 0
    text = "\n".join(_calibration_lines(Calibration(700.0, 200.0, 100.0)))
    assert "| 700 |" in text and "| 200 |" in text and "| 100 |" in text
    assert "costs 1.00 ms of CPU a call above the bare GET" in text and "about 1.70 ms in redis-py" in text
    level = "\n".join(_calibration_lines(Calibration(134.0, 142.0, 40.0)))
    assert "costs what the bare GET costs" in level and "-0.0" not in level
