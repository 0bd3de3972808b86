"""INTERLOCK_PAUSE_AT: a failpoint that stops its own process (SIGSTOP) instead of killing it, and lets it
carry on from the same line on SIGCONT — what the chaos pause cells need to stall a rail worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interlock.failpoints import arm, failpoint

ENV = {"PATH": "/usr/bin:/bin"}


def state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def wait_until(predicate, what: str, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def start(code: str, env: dict[str, str], tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=o, stderr=e)
    return proc, out, err


@pytest.mark.parametrize("how", ["failpoint('rail.after_wal_before_call')",
                                 "arm('rail.after_wal_before_call', 5).join()"])  # fmt: skip
def test_pause_stops_the_process_at_the_point_and_sigcont_resumes_it(how: str, tmp_path: Path) -> None:
    code = f"from interlock.failpoints import arm, failpoint\nprint('before', flush=True)\n{how}\nprint('after')"
    env = {**ENV, "INTERLOCK_PAUSE_AT": "rail.after_wal_before_call"}
    proc, out, err = start(code, env, tmp_path)
    try:
        wait_until(lambda: state(proc.pid) == "T", "the process to stop itself")
        time.sleep(0.2)  # stopped means stopped: nothing more is written while it is
        assert out.read_text() == "before\n"
        assert err.read_text() == f"failpoint rail.after_wal_before_call: SIGSTOP pid {proc.pid}\n"
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert out.read_text() == "before\nafter\n", "it carries on from the same line; stdout gets nothing of ours"
    assert "SIGCONT" in err.read_text()


def test_a_pause_fires_once_per_process(tmp_path: Path) -> None:
    code = ("from interlock.failpoints import failpoint\n"
            "for _ in range(3):\n    failpoint('rail.during_call')\nprint('done')")  # fmt: skip
    proc, out, err = start(code, {**ENV, "INTERLOCK_PAUSE_AT": "rail.during_call"}, tmp_path)
    try:
        wait_until(lambda: state(proc.pid) == "T", "the first pause")
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert out.read_text() == "done\n"
    assert err.read_text().count("SIGSTOP") == 1


def test_kill_at_is_unchanged_when_a_pause_is_also_named(tmp_path: Path) -> None:
    code = "from interlock.failpoints import failpoint\nfailpoint('rail.before_wal')\nprint('survived')"
    env = {**ENV, "INTERLOCK_KILL_AT": "rail.before_wal", "INTERLOCK_PAUSE_AT": "rail.before_wal"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == -9
    assert result.stdout == ""
    assert "failpoint rail.before_wal: SIGKILL" in result.stderr


def test_pause_and_arm_are_no_ops_for_other_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INTERLOCK_KILL_AT", raising=False)
    monkeypatch.setenv("INTERLOCK_PAUSE_AT", "rail.during_call")
    failpoint("rail.after_wal_before_call")  # a different point: this test process is not stopped
    assert arm("rail.before_wal", 5) is None
    with pytest.raises(ValueError, match="unknown failpoint"):
        arm("rail.nowhere", 5)
