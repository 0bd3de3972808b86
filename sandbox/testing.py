"""Start the sandbox rail as a real subprocess, for tests, the chaos runner and the bench.

    with start_sandbox(tmp_path, faults=[{"name": "ambiguous_504", "rate": 1.0}]) as rail:
        client = RazorpayClient(rail.url, rail.key_id, rail.key_secret)
        ...
        assert rail.count_stamped(sik) == 1

The process is stopped by pid (SIGTERM, then SIGKILL), never by name. After it is dead,
`journal_count_for_stamp(data_dir, sik)` still counts what it did, straight from its SQLite file.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from sandbox.cli import DEFAULT_KEY_ID, DEFAULT_KEY_SECRET
from sandbox.journal import JOURNAL_FILENAME, count_stamped

logger = logging.getLogger(__name__)

FaultSpec = Mapping[str, Any]
# The delay of a request slow_held holds: longer than any test waits, so only a release ends it.
HELD_MS = 600_000


class SandboxStartError(RuntimeError):
    """Raised when the sandbox process exits or is not serving before the start deadline; carries its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (prefer start_sandbox(port=None), which cannot race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll *predicate* until it returns something truthy (returned) or *timeout* passes (TimeoutError)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(interval)


class SandboxProcess:
    """A running sandbox subprocess: its address, credentials, control calls and journal."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        host: str,
        port: int,
        data_dir: Path,
        key_id: str,
        key_secret: str,
        log_path: Path,
    ) -> None:
        self.proc = proc
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.key_id = key_id
        self.key_secret = key_secret
        self.log_path = log_path
        self.url = f"http://{host}:{port}"
        self._http = httpx.Client(base_url=self.url, auth=(key_id, key_secret), timeout=10.0)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def journal_path(self) -> Path:
        return self.data_dir / JOURNAL_FILENAME

    def rail_env(self) -> dict[str, str]:
        """The INTERLOCK_RAIL_* variables that point another process at this sandbox."""
        return {
            "INTERLOCK_RAIL_URL": self.url,
            "INTERLOCK_RAIL_KEY_ID": self.key_id,
            "INTERLOCK_RAIL_KEY_SECRET": self.key_secret,
        }

    # -- control surface -----------------------------------------------------------------------

    def set_faults(self, faults: Sequence[FaultSpec] = (), *, seed: int | None = None) -> dict[str, Any]:
        """Replace the active fault profiles ([] clears them); returns the sandbox's view of them."""
        body: dict[str, Any] = {"faults": [dict(f) for f in faults]}
        if seed is not None:
            body["seed"] = seed
        return self._control("POST", "/__sandbox/faults", body)

    def clear_faults(self) -> None:
        self.set_faults([])

    def faults(self) -> dict[str, Any]:
        return self._control("GET", "/__sandbox/faults")

    def add_payment(
        self, payment_id: str, amount: int, *, currency: str = "INR", prior_refunds: int = 0, **extra: Any
    ) -> dict[str, Any]:
        """Create (or replace) a captured payment; returns the payment entity."""
        body = {"id": payment_id, "amount": amount, "currency": currency, "prior_refunds": prior_refunds, **extra}
        return self._control("POST", "/__sandbox/payments", body)

    def set_balance(self, amount: int) -> dict[str, Any]:
        return self._control("POST", "/__sandbox/balance", {"amount": amount, "currency": "INR"})

    def add_fund_account(
        self, fund_account_id: str | None = None, *, account_type: str = "bank_account", active: bool = True,
        **extra: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """Create (or replace) a RazorpayX fund account and its contact; returns the fund account entity.

        *extra*: `contact` {id, name, email, contact, type, reference_id, notes, active} or `contact_id`, and
        `bank_account` {name, ifsc, account_number} or `vpa` {address} (see docs/sandbox.md)."""
        body: dict[str, Any] = {"account_type": account_type, "active": active, **extra}
        if fund_account_id is not None:
            body["id"] = fund_account_id
        return self._control("POST", "/__sandbox/fund_accounts", body)

    def set_banking_balance(self, amount: int) -> dict[str, Any]:
        """Set the RazorpayX business account's balance (queued payouts it pays for start); returns the balance."""
        return self._control("POST", "/__sandbox/banking_balance", {"amount": amount, "currency": "INR"})

    def move_payout(self, payout_id: str, status: str) -> dict[str, Any]:
        """Move a payout on by hand (processed, failed or reversed), as RazorpayX test mode's dashboard does."""
        return self._control("POST", f"/__sandbox/payouts/{payout_id}/status", {"status": status})

    def hold_lifecycle(self, held: bool = True) -> dict[str, Any]:
        """Hold the lifecycle's schedule (nothing scheduled moves) or release it (what fell due moves before this
        returns); answers {held, moved}."""
        return self._control("POST", "/__sandbox/lifecycle", {"held": held})

    @contextmanager
    def lifecycle_held(self) -> Iterator[None]:
        """Nothing the lifecycle has scheduled moves inside the block; at its end what fell due moves. A test orders
        its own calls against a scheduled change this way, not by racing the clock."""
        self.hold_lifecycle()
        try:
            yield
        finally:
            self.hold_lifecycle(False)

    def release_slow(self) -> int:
        """End the delay of every request the slow fault is holding now; returns how many."""
        return int(self._control("POST", "/__sandbox/slow/release")["released"])

    @contextmanager
    def slow_held(self, scope: str = "money") -> Iterator[None]:
        """Every request in *scope* is held inside the block (a slow fault no test waits out): its idempotency key in
        progress, its apply not made. At the end the faults are cleared and the held requests let go. A test orders
        its own calls against a slow request this way, not by racing its delay."""
        self.set_faults([{"name": "slow", "rate": 1.0, "scope": scope, "params": {"delay_ms": HELD_MS}}])
        try:
            yield
        finally:
            self.clear_faults()
            self.release_slow()

    def health(self) -> dict[str, Any]:
        """pid, journal path, idempotency keys in progress, slow applies still pending, requests slow is holding."""
        return self._control("GET", "/__sandbox/health")

    def journal(self) -> dict[str, Any]:
        """The whole journal: entities (with the requests that made them), payments, balances, keys, events."""
        return self._control("GET", "/__sandbox/journal")

    def entities(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.journal()["entities"] if kind is None or e["kind"] == kind]

    def count_stamped(self, sik: str) -> int:
        """Entities whose notes.interlock_sik == sik or receipt == "ilk_" + sik — what the rail really did."""
        return journal_count_for_stamp(self.data_dir, sik)

    def _control(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = self._http.request(method, path, json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    # -- lifecycle ------------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise SandboxStartError(f"sandbox exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/__sandbox/health", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        self.kill()
        raise SandboxStartError(f"sandbox not serving on {self.url} after {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within *timeout*; returns the exit code."""
        self._http.close()
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                logger.warning("sandbox pid %s ignored SIGTERM for %ss; killing", self.pid, timeout)
        return self.kill()

    def kill(self) -> int | None:
        """SIGKILL by pid, as a crash would; the journal keeps what was committed."""
        self._http.close()
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        return self.proc.wait(10)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_sandbox(
    data_dir: Path,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    seed_file: Path | None = None,
    faults: Sequence[FaultSpec] | None = None,
    seed: int | None = None,
    key_id: str | None = None,
    key_secret: str | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 20.0,
) -> SandboxProcess:
    """Launch `python -m sandbox` on *port* (None: a free one, chosen by the sandbox itself) and wait until it serves.

    *faults* are profiles as POST /__sandbox/faults takes them ({name, rate, scope?, params?}).
    Credentials default to the sandbox's own defaults, not to this process's environment, so a test
    is not steered by whatever INTERLOCK_RAIL_* happens to be exported.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    key_id = key_id or DEFAULT_KEY_ID
    key_secret = key_secret or DEFAULT_KEY_SECRET
    ready_file = data_dir / "sandbox.ready.json"
    ready_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "sandbox", "--port", str(port or 0), "--data", str(data_dir), "--host", host]
    cmd += ["--key-id", key_id, "--key-secret", key_secret, "--ready-file", str(ready_file)]
    if seed_file is not None:
        cmd += ["--seed-file", str(seed_file)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    log_path = data_dir / "sandbox.log"
    child_env = {**os.environ, **(env or {})}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env)
    bound = _wait_for_ready_file(proc, ready_file, log_path, ready_timeout)
    sandbox = SandboxProcess(
        proc, host=host, port=bound, data_dir=data_dir, key_id=key_id, key_secret=key_secret, log_path=log_path
    )
    sandbox.wait_ready(ready_timeout)
    if faults:
        sandbox.set_faults(faults, seed=seed)
    return sandbox


def _wait_for_ready_file(proc: subprocess.Popen[bytes], ready_file: Path, log_path: Path, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_file.exists():
            return int(json.loads(ready_file.read_text())["port"])
        if proc.poll() is not None:
            raise SandboxStartError(f"sandbox exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.02)
    proc.kill()
    proc.wait(10)
    raise SandboxStartError(f"sandbox did not bind within {timeout}s:\n{log_path.read_text(errors='replace')}")


def journal_count_for_stamp(data_dir: Path, sik: str) -> int:
    """Count entities carrying *sik*'s stamp by reading the journal file directly (works after the sandbox died)."""
    path = Path(data_dir) / JOURNAL_FILENAME
    if not path.exists():
        return 0
    conn = sqlite3.connect(path, timeout=10.0)
    try:
        return count_stamped(conn, sik)
    finally:
        conn.close()
