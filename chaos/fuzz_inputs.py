"""The hostile inputs of `interlock fuzz`: hypothesis-generated tool arguments, malformed JSON-RPC frames and
raw HTTP abuse. Every input is malformed *by construction* (its `kind` names the defect), so none of them
may ever reach the gates: the verdict is that each gets a clear error and leaves no trace in the ledger.

What counts as malformed (the contract the verdict checks):

* **args** — a `tools/call` whose arguments break the tool contract (SPEC §10): an amount that is not a
  positive int64 (wrong JSON type, zero, negative, beyond 2^63-1, a float literal such as 1.0 or 1e309,
  NaN / Infinity literals), a missing or unknown field, a bad id, oversized strings or notes, arguments
  over 64 KiB or nested deeper than 32, a NUL or a lone surrogate in an id, an unknown tool, junk `_meta`
  (a non-object task, a bad operation_ref), or a duplicate key (two `amount`s — which value would be
  paid is up to the parser, so the call is ambiguous and refused).
* **frames** — a JSON-RPC message that is not a valid request: truncated or non-JSON text, a batch (MCP
  since 2025-06-18 has none), a wrong or missing `jsonrpc` version, a wrong or missing method, an id of
  a type JSON-RPC forbids, params of the wrong type.
* **http** — an HTTP request the endpoint must refuse before MCP runs: a wrong method, path, content type
  or Accept header, no body, a missing or unknown bearer token, chunked garbage, a body larger than the
  ingress accepts, a body sent slowly (then malformed) or abandoned half way.

Each input is JSON *text* (not a Python value) so duplicate keys and non-standard literals reach the wire.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

PAYMENT_ID = "pay_fuzzTarget001"  # a real, refundable payment on the sandbox: a slipped call would pay
MONEY_TOOLS = ("create_refund", "create_instant_settlement")
ARG_KINDS = ("amount_type", "amount_literal", "amount_range", "dup_amount", "missing_field", "unknown_field", "bad_id",
             "oversized_string", "deep_nesting", "notes_abuse", "junk_meta", "unknown_tool", "arguments_not_object",
             "nul_surrogate")  # fmt: skip
FAMILIES = ("args", "frames", "http")


@dataclass
class FuzzInput:
    family: str  # args | frames | http
    kind: str  # the defect it carries
    transport: str  # http | stdio
    body: bytes = b""  # a JSON-RPC message as text (args, frames) or an HTTP request body
    # http family: how to send it (see chaos.fuzz.send_raw_http)
    raw: dict[str, Any] = field(default_factory=dict)
    # False only for a body the client abandons: no answer is owed to a client that went away.
    expects_answer: bool = True


class Raw(str):
    """JSON text placed as is (NaN, 1e309, a 400-digit integer, a string with a lone surrogate escape)."""


class Pairs(list[tuple[str, Any]]):
    """A JSON object as a list of pairs, so a key may appear twice."""


def dumps(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Pairs):
        return "{" + ",".join(f"{json.dumps(k)}:{dumps(v)}" for k, v in value) + "}"
    if isinstance(value, dict):
        return dumps(Pairs(value.items()))
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value)


# -- args: hypothesis strategies ----------------------------------------------------------------------

_BAD_NUMBER_LITERALS = ["NaN", "Infinity", "-Infinity", "1e309", "-1e309", "1.0", "1e2", "100.5", "-0", "0",
                        "1E400", "0.0", "-1", "9223372036854775808", "1" + "0" * 400, "-" + "9" * 40]  # fmt: skip
_IDS_BAD = st.one_of(
    st.text(max_size=80).filter(lambda s: not (1 <= len(s) <= 64 and s.replace("_", "").isalnum() and s.isascii())),
    st.just(Raw('"pay_\\u0000abc"')),
    st.just(Raw('"pay_\\ud800"')),
    st.just(Raw('"\\udfff\\ud800"')),
    st.just("pay_" + "A" * 61),
    st.integers(),
    st.none(),
    st.lists(st.just(PAYMENT_ID), max_size=2),
)
_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                       st.text(max_size=20))  # fmt: skip
_JUNK = st.recursive(_JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)  # fmt: skip


def _nested(depth: int) -> Raw:
    return Raw("[" * depth + "1" + "]" * depth)


def _bad_amount() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from([Raw(x) for x in _BAD_NUMBER_LITERALS]),
        st.integers(max_value=0),
        st.integers(min_value=2**63),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=30),
        st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=3),
        st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=3),
    )


@st.composite
def tool_calls(draw: st.DrawFn, kind: str) -> tuple[str, str, str]:
    """(kind, tool name, JSON text of the params object) of one malformed tools/call with the defect *kind*."""
    tool = draw(st.sampled_from(MONEY_TOOLS))
    base: list[tuple[str, Any]] = (
        [("payment_id", PAYMENT_ID), ("amount", 1000)] if tool == "create_refund" else [("amount", 1000)]
    )
    if draw(st.booleans()):  # an optional field that is valid on its own, so the defect is the only one
        base.append(("speed", "normal") if tool == "create_refund" else ("description", "fuzz payout"))
    args = list(base)
    meta: Any = None
    name = tool
    if kind == "amount_type":
        args = _put(args, "amount", draw(_bad_amount()))
    elif kind == "amount_literal":
        args = _put(args, "amount", Raw(draw(st.sampled_from(_BAD_NUMBER_LITERALS))))
    elif kind == "amount_range":
        args = _put(args, "amount", draw(st.one_of(st.integers(max_value=0), st.integers(min_value=2**63))))
    elif kind == "dup_amount":
        # Two amounts, each valid on its own: only the duplicate makes it malformed.
        first, second = draw(st.integers(100, 5000)), draw(st.integers(100, 5000))
        args = [*args, ("amount", second if first != second else second + 1)]
        args[[k for k, _ in args].index("amount")] = ("amount", first)
    elif kind == "missing_field":
        # A refund without payment_id; a settlement with neither amount nor settle_full_balance.
        gone = "payment_id" if tool == "create_refund" else "amount"
        args = [p for p in args if p[0] != gone]
        if draw(st.booleans()):
            args.append(("notes", draw(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8),
                                                       max_size=3))))  # fmt: skip
    elif kind == "unknown_field":
        key = draw(st.one_of(st.sampled_from(["agent_id", "merchant_id", "interlock/task", "sik", "currency",
                                              "Amount", "amount ", "payment_id\u0000"]),
                             st.text(min_size=1, max_size=20)))  # fmt: skip
        args = [*args, (key, draw(_JUNK))] if key not in dict(args) else [*args, ("x" + key, 1)]
    elif kind == "bad_id":
        if tool == "create_refund":
            args = _put(args, "payment_id", draw(_IDS_BAD))
        else:
            args = [*args, ("description", draw(st.text(min_size=31, max_size=60)))]
    elif kind == "oversized_string":
        size = draw(st.sampled_from([257, 5_000, 70_000, 300_000]))
        field_name = draw(st.sampled_from(["interlock_distinct_reason", "payment_id", "notes"]))
        text = "x" * size
        args = _put(args, field_name, {"k": text} if field_name == "notes" else text)
        if field_name == "interlock_distinct_reason" and size < 201:
            args = _put(args, field_name, "y" * 201)
    elif kind == "deep_nesting":
        depth = draw(st.sampled_from([33, 64, 500, 5_000, 50_000]))
        args = [*args, (draw(st.sampled_from(["notes", "amount", "speed"])), _nested(depth))]
    elif kind == "notes_abuse":
        notes = draw(st.one_of(
            st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), min_size=15, max_size=30),
            st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.integers(), st.none(), st.booleans(),
                                                                      st.lists(st.integers())), min_size=1,
                            max_size=3),
            st.just({"interlock_sik": "A" * 32}),
            st.just({"k" * 257: "v"}),
            st.just(Raw('{"a":"1","a":"2"}')),
        ))  # fmt: skip
        args = [*args, ("notes", notes)]
        if isinstance(notes, Raw):
            kind = "dup_notes_key"
    elif kind == "junk_meta":
        meta = draw(st.one_of(
            st.fixed_dictionaries({"interlock/operation_ref": st.one_of(
                st.text(min_size=65, max_size=80), st.integers(), st.just(""), st.just("op ref"),
                st.just(Raw('"op\\u0000"')))}),
            st.fixed_dictionaries({"interlock/task": st.one_of(st.text(max_size=10), st.integers(), st.lists(
                st.integers(), max_size=3), st.booleans())}),
            st.fixed_dictionaries({"interlock/task_sig": st.one_of(st.text(max_size=10), st.integers())}),
            st.fixed_dictionaries({"interlock/task": st.just(_nested(40))}),
        ))  # fmt: skip
    elif kind == "unknown_tool":
        name = draw(st.one_of(st.sampled_from(["create_refunds", "CREATE_REFUND", "create_refund ", "", "refund",
                                               "create_payout", "create_refund\u0000"]),
                              st.text(max_size=30).filter(lambda s: s not in MONEY_TOOLS)))  # fmt: skip
        if name in ("fetch_payment", "fetch_refund", "interlock_status"):
            name = name + "_"
    elif kind == "arguments_not_object":
        value = draw(st.one_of(st.lists(_JSON_LEAF, max_size=3), st.text(max_size=10), st.integers(),
                               st.just(Raw('"{\\"amount\\": 1000}"'))))  # fmt: skip
        params = Pairs([("name", tool), ("arguments", value)])
        return kind, tool, dumps(params)
    elif kind == "nul_surrogate":
        # A NUL or a lone surrogate spliced into an otherwise valid id or description, as a JSON escape.
        text = PAYMENT_ID if tool == "create_refund" else "fuzz payout"
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(["\\u0000", "\\ud83d", "\\udc00", "\\udfff\\ud800", "\u0000"]))
        args = _put(args, "payment_id" if tool == "create_refund" else "description",
                    Raw('"' + text[:at] + junk + text[at:] + '"'))
    params = Pairs([("name", name), ("arguments", Pairs(args))])
    if meta is not None:
        params.append(("_meta", meta))
    return kind, name, dumps(params)


def _put(pairs: list[tuple[str, Any]], key: str, value: Any) -> list[tuple[str, Any]]:
    out = [(k, value if k == key else v) for k, v in pairs]
    return out if key in dict(pairs) else [*out, (key, value)]


def hypothesis_draws(strategy: st.SearchStrategy[Any], n: int, seed: int) -> list[Any]:
    """*n* values from *strategy*, deterministic for a seed, without running as a test."""
    out: list[Any] = []

    @hypothesis_seed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    if out and len(out) < n:  # hypothesis stops once a small space is exhausted: send those again
        out = out * (n // len(out) + 1)
    return out[:n]


# -- frames: malformed JSON-RPC messages --------------------------------------------------------------


def _call_frame(i: int) -> str:
    arguments = {"payment_id": PAYMENT_ID, "amount": 1000}
    return dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                  "params": {"name": "create_refund", "arguments": arguments}})  # fmt: skip


FRAME_ID = 424242
FrameMaker = Callable[[random.Random, int], str]


def _truncated(rng: random.Random, i: int) -> str:
    text = _call_frame(i)
    return text[: rng.randrange(1, len(text) - 1)]


def _params_type(rng: random.Random, i: int) -> str:
    text = _call_frame(i)
    return text[: text.index('"params":') + 9] + rng.choice(['"x"', "1", "[1,2]", "true"]) + "}"


# Each owes a JSON-RPC error (over HTTP, or an HTTP 400 carrying one): none is a request the SDK may run.
FRAMES: dict[str, FrameMaker] = {
    "truncated": _truncated,
    "not_json": lambda rng, i: rng.choice(["hello", "{]", "nul\u0000l", "\ud800", "[", "}", "'{}'", "{'a':1}",
                                           '{"jsonrpc":"2.0",}', "\x00\x01\x02"]),  # fmt: skip
    "batch": lambda rng, i: "[" + ",".join([_call_frame(i)] * rng.randint(1, 3)) + "]",
    "empty_batch": lambda rng, i: "[]",
    "wrong_version": lambda rng, i: _call_frame(i).replace('"2.0"', rng.choice(['"1.0"', '"3.0"', "2.0", "null",
                                                                             '""', '"2.0 "'])),  # fmt: skip
    "no_version": lambda rng, i: _call_frame(i).replace('"jsonrpc":"2.0",', ""),
    "wrong_method": lambda rng, i: _call_frame(i).replace("tools/call", rng.choice(
        ["tools/calls", "tools/Call", "", "rpc.discover", "resources/read", "tools/call/", "x" * 5000])),
    "method_type": lambda rng, i: _call_frame(i).replace('"tools/call"', rng.choice(["1", "null", "[]", "{}"])),
    "id_type": lambda rng, i: _call_frame(i).replace(f'"id":{i}', '"id":' + rng.choice(
        ["1.5", "true", "[1]", '{"a":1}', "NaN", "1e309", "false", "-0.5"])),
    "params_type": _params_type,
    "dup_method": lambda rng, i: _call_frame(i)[:-1] + ',"method":"tools/list"}',
    "dup_id": lambda rng, i: _call_frame(i)[:-1] + f',"id":{i + 1}' + "}",
    "huge_frame": lambda rng, i: _call_frame(i).replace('"amount":1000',
                                                        '"amount":1000,"notes":{"k":"' + "x" * 2_000_000 + '"}'),
    "deep_frame": lambda rng, i: _call_frame(i).replace('"amount":1000', '"amount":' + _nested(100_000)),
}


# -- http: raw requests -------------------------------------------------------------------------------

HTTP_KINDS = ("wrong_content_type", "no_content_type", "no_body", "wrong_accept", "wrong_method", "wrong_path",
              "no_token", "bad_token", "chunked_garbage", "chunked_truncated", "bad_content_length", "oversized_body",
              "slow_body", "abandoned_body", "garbage_request_line", "bad_session")  # fmt: skip


def http_input(kind: str, rng: random.Random, i: int) -> FuzzInput:
    body = _call_frame(i).encode()
    raw: dict[str, Any] = {"method": "POST", "path": "/mcp", "content_type": "application/json",
                           "accept": "application/json, text/event-stream", "token": True, "session": True}  # fmt: skip
    if kind == "wrong_content_type":
        raw["content_type"] = rng.choice(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          "application/jsonx", "text/event-stream"])  # fmt: skip
    elif kind == "no_content_type":
        raw["content_type"] = None
    elif kind == "no_body":
        body = b""
    elif kind == "wrong_accept":
        raw["accept"] = rng.choice(["text/html", "application/xml", None, "text/event-stream"])
    elif kind == "wrong_method":
        raw["method"] = rng.choice(["PUT", "PATCH", "OPTIONS", "TRACE", "FOO"])
    elif kind == "wrong_path":
        raw["path"] = rng.choice(["/", "/mcp/", "/mcpx", "/MCP", "/../mcp", "/mcp%00", "/" + "a" * 2000, "/sse"])
    elif kind == "no_token":
        raw["token"] = None
    elif kind == "bad_token":
        raw["token"] = rng.choice(["x", "Bearer", "a" * 5000, "tok\u00e9n"])
    elif kind == "chunked_garbage":
        raw["chunked"] = rng.choice([b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhello world\r\n0\r\n\r\n",
                                     b"-1\r\n\r\n", b"0x5\r\nhello\r\n0\r\n\r\n"])  # fmt: skip
    elif kind == "chunked_truncated":
        # A chunk announced and never finished: the server rightly waits for it, until the client goes away.
        raw["chunked"] = rng.choice([b"ffffffffffffffffffff\r\nx\r\n", b"3\r\n{\"a\r\n", b"10\r\n"])
        raw["abandon"] = True
    elif kind == "bad_content_length":
        raw["content_length"] = rng.choice(["-1", "abc", "1e3", "0x10", "99999999999999999999", "1, 2"])
    elif kind == "oversized_body":
        body = _call_frame(i).replace('"amount":1000', '"amount":1000,"notes":{"k":"' + "x" * rng.choice(
            [5_000_000, 12_000_000]) + '"}').encode()  # fmt: skip
    elif kind == "slow_body":
        raw["slow"] = True
        body = body[:-3]  # malformed once complete
    elif kind == "abandoned_body":
        raw["abandon"] = True
    elif kind == "garbage_request_line":
        raw["garbage"] = rng.choice([b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET\r\n\r\n",
                                     b"POST /mcp HTTP/9.9\r\n\r\n", b"\r\n\r\n\r\n", b"POST /mcp\r\n\r\n"])  # fmt: skip
    elif kind == "bad_session":
        raw["session"] = rng.choice(["nope", "0" * 32, "\u00e9"])
    # The answer is an HTTP status here, never a JSON-RPC result.
    return FuzzInput("http", kind, "http", body, raw, expects_answer=not raw.get("abandon"))


def _share(total: int, parts: int, i: int) -> int:
    return total // parts + (1 if i < total % parts else 0)


def build_inputs(n: int, seed: int) -> list[FuzzInput]:
    """*n* inputs: ~60% hypothesis tool arguments, ~25% frames, ~15% raw HTTP; both transports throughout."""
    rng = random.Random(seed)
    n_http = max(len(HTTP_KINDS), n * 15 // 100)
    n_frames = max(2 * len(FRAMES), n * 25 // 100)
    n_args = max(1, n - n_http - n_frames)
    inputs: list[FuzzInput] = []
    drawn = [call for i, kind in enumerate(ARG_KINDS)
             for call in hypothesis_draws(tool_calls(kind), _share(n_args, len(ARG_KINDS), i), seed + i)]  # fmt: skip
    for j, (kind, _name, params) in enumerate(drawn):
        transport = "http" if j % 2 == 0 else "stdio"
        frame = '{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":' + params + "}"
        inputs.append(FuzzInput("args", kind, transport, frame.encode("utf-8", "surrogatepass")))
    frame_kinds = sorted(FRAMES)
    for j in range(n_frames):
        kind = frame_kinds[j % len(frame_kinds)]
        text = FRAMES[kind](rng, FRAME_ID).replace(f'"id":{FRAME_ID},', '"id":ID,')  # the sender puts a unique id
        transport = "http" if (j // len(frame_kinds)) % 2 == 0 else "stdio"
        inputs.append(FuzzInput("frames", kind, transport, text.encode("utf-8", "surrogatepass")))
    for j in range(n_http):
        inputs.append(http_input(HTTP_KINDS[j % len(HTTP_KINDS)], rng, j))
    rng.shuffle(inputs)
    return inputs
