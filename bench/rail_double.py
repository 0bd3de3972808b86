"""A minimal rail double for the performance bench: its own HTTP process that answers Razorpay's refund
calls after a fixed latency, so the rail worker's own limit can be told apart from the sandbox's.

`python -m bench.rail_double --latency-ms 200 --ready-file F` serves, on 127.0.0.1 (HTTP/1.1 keep-alive,
TCP_NODELAY), only what the rail worker and a reconciler use: POST /v1/payments/{id}/refund (the same
X-Refund-Idempotency key answers the original refund), GET /v1/payments/{id}/refunds and GET
/v1/payments/{id} (every payment is a captured Rs 1,000 one). It keeps its refunds in memory, checks no
credentials and has no journal and no faults: it is a measuring device, not a rail. Nothing but the
bench starts it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import time
from pathlib import Path
from typing import Any

PAYMENT_AMOUNT = 100_000
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


class RailDouble:
    def __init__(self, latency_ms: int) -> None:
        self.latency_s = latency_ms / 1000
        self.refunds: dict[str, list[dict[str, Any]]] = {}  # payment id -> refunds, oldest first
        self.by_key: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)

    async def answer(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        path, _, query = target.partition("?")
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[:2] == ["v1", "payments"]:
            payment_id = parts[2]
            if method == "POST" and parts[3:] == ["refund"]:
                await asyncio.sleep(self.latency_s)
                return 200, self.refund(payment_id, json.loads(body or b"{}"), headers.get("x-refund-idempotency"))
            if method == "GET" and parts[3:] == ["refunds"]:
                args = dict(pair.partition("=")[::2] for pair in query.split("&") if pair)
                newest_first = self.refunds.get(payment_id, [])[::-1]
                skip, count = int(args.get("skip", 0)), int(args.get("count", 10))
                page = newest_first[skip : skip + count]
                return 200, {"entity": "collection", "count": len(page), "items": page}
            if method == "GET" and len(parts) == 3:
                return 200, {"id": payment_id, "entity": "payment", "amount": PAYMENT_AMOUNT, "currency": "INR",
                             "status": "captured", "captured": True, "amount_refunded": 0, "notes": []}  # fmt: skip
        return 400, {"error": {"code": "BAD_REQUEST_ERROR", "description": "The requested URL was not found on "
                               "the server.", "source": "NA", "step": "NA", "reason": "NA"}}  # fmt: skip

    def refund(self, payment_id: str, request: dict[str, Any], key: str | None) -> dict[str, Any]:
        if key is not None and key in self.by_key:
            return self.by_key[key]
        refund = {
            "id": f"rfnd_dbl{next(self.ids):010d}", "entity": "refund", "amount": request.get("amount"),
            "currency": "INR", "payment_id": payment_id, "notes": request.get("notes") or [],
            "receipt": request.get("receipt"), "status": "processed", "speed_requested": "normal",
            "speed_processed": "normal", "created_at": int(time.time()),
        }  # fmt: skip
        self.refunds.setdefault(payment_id, []).append(refund)
        if key is not None:
            self.by_key[key] = refund
        return refund

    async def serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, target, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload = await self.answer(method, target, headers, body)
                data = json.dumps(payload).encode("utf-8")
                writer.write(f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\n\r\n".encode("latin-1") + data)  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass  # the client closed (or spoke something this double does not): drop the connection
        finally:
            writer.close()


async def serve(latency_ms: int, port: int, ready_file: Path | None) -> None:
    double = RailDouble(latency_ms)
    server = await asyncio.start_server(double.serve_connection, "127.0.0.1", port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    if ready_file is not None:
        ready_file.write_text(json.dumps({"port": bound, "url": f"http://127.0.0.1:{bound}"}), encoding="utf-8")
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rail_double", description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args()
    asyncio.run(serve(args.latency_ms, args.port, args.ready_file))


if __name__ == "__main__":
    main()
