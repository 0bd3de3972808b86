"""Serving the app: bind the port ourselves (a clear error when it is taken), run uvicorn, and drop
connections at the socket level while a `partition` fault is active.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import struct
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from sandbox.app import create_app
from sandbox.faults import FaultSet, Kind
from sandbox.rail import Rail

logger = logging.getLogger(__name__)

# An idle kept-alive connection is closed after this long: longer than its clients keep one to reuse (httpx and
# rails/wire.py: 5 s), as a real rail's front is (nginx's default is 75 s). With uvicorn's default, 5 s, a client
# reusing a connection idle just under 5 s could write its request as the rail closed it, and get no answer: on a
# busy machine a test's control call failed so, and a money call would be Lost (ambiguous).
KEEP_ALIVE_S = 75


class PortInUse(OSError):
    """Raised when the sandbox's port is already bound by another process; names host and port."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"port {port} on {host} is already in use; pick another with --port")
        self.host = host
        self.port = port


def bind(host: str, port: int) -> socket.socket:
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when it can see they
    # are TCP, and without it every small response waits ~40 ms on Nagle + delayed ACK.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # SO_REUSEADDR lets a restarted sandbox take its old port while the old sockets sit in TIME_WAIT;
    # it does not let two live listeners share it (that still fails with EADDRINUSE below).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def partition_protocol(faults: FaultSet) -> type[H11Protocol]:
    """An h11 protocol whose requests under /v1 are dropped, unanswered, while a partition lasts.

    The drop happens below the app — the connection is reset with no status line at all — because
    that is what a partition looks like to a client; an HTTP error response would be an answer.
    /__sandbox stays reachable so a test can always clear the fault.
    """

    class PartitionedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            inner = self.app

            async def app(scope: Any, receive: Any, send: Any) -> None:
                if scope["type"] == "http" and scope["path"].startswith("/v1/"):
                    kind: Kind = "reads" if scope["method"] == "GET" else "money"
                    mode = faults.partition_drop(kind)
                    if mode is not None:
                        if mode == "hang":
                            await asyncio.sleep(faults.partition_remaining())
                        self._reset()
                        return
                await inner(scope, receive, send)

            self.app = app

        def _reset(self) -> None:
            # SO_LINGER 0 turns close into a TCP RST: the client sees "connection reset", not a clean EOF.
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if self.cycle is not None:
                self.cycle.disconnected = True  # tells uvicorn not to send its own 500
            self.transport.abort()

    return PartitionedH11Protocol


def serve(rail: Rail, sock: socket.socket, *, ready_file: Path | None = None) -> None:
    app = create_app(rail)
    config = uvicorn.Config(
        app,
        http=partition_protocol(rail.faults),
        lifespan="off",
        log_level="warning",
        access_log=False,
        # Slow applies may still be sleeping at SIGTERM; give them a moment, then go.
        timeout_graceful_shutdown=2,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    if ready_file is not None:
        # Written after bind+listen: connections queue in the backlog until uvicorn serves them.
        tmp = ready_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid()}))
        tmp.replace(ready_file)
    logger.warning("sandbox rail serving on http://%s:%s (journal %s)", host, port, rail.journal.path)
    server.run(sockets=[sock])
