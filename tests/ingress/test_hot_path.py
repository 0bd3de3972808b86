"""The HTTP ingress's listening socket: accepted connections get TCP_NODELAY.

asyncio (under uvicorn) sets TCP_NODELAY on an accepted connection only when the listening socket says it is
TCP (proto IPPROTO_TCP, not 0). Without it every MCP answer, several small SSE writes, waited on Nagle and
the client's delayed ACK (~40 ms a call: most of the gated latency measured before issue 14)."""

from __future__ import annotations

import asyncio
import socket

from interlock.http_serve import bind


def test_connections_accepted_by_the_ingress_socket_do_not_wait_on_nagle() -> None:
    async def accepted_nodelay() -> int:
        sock = bind("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
            value = await asyncio.wait_for(seen, 5)
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0
