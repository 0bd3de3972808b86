"""Starting and stopping real actor processes in tests (by pid, always)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

INTERLOCK = [sys.executable, "-m", "interlock.cli"]


class Proc:
    def __init__(self, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.args = args
        self.log = log
        handle = log.open("ab")
        self.popen = subprocess.Popen(args, env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)  # fmt: skip
        handle.close()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextmanager
def running(*procs: Proc) -> Iterator[tuple[Proc, ...]]:
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def wait_until(predicate: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def closed_by_server(sock: socket.socket) -> bool:
    """Read until the server closes (True) or the generous read deadline passes with it still open (False)."""
    sock.settimeout(60)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True  # reset by the server
    return True
