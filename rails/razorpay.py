"""The Razorpay REST client Interlock uses, against the sandbox and against api.razorpay.com alike.

Every call either returns a typed entity or raises `RailError` whose `kind` is one of three facts
about the money, which the rail worker maps to state transitions (SPEC §8):

* REJECTED  — a definitive 4xx with Razorpay's error body: the rail refused, nothing moved.
* AMBIGUOUS — the request may have been applied: 5xx (including a gateway's HTML 504), 409 "still
  processing", a 429 (rate limited: not a decision), a timeout or reset after the request left, an
  unreadable body, a 4xx that is not a Razorpay error (a proxy's page), a 4xx about the payout idempotency
  key (used before with another body).
* NOT_SENT  — nothing left this machine: connection refused, connect or pool timeout, a forward proxy
  that cannot be reached or refuses the CONNECT tunnel (HTTPS_PROXY, rails.egress), or the caller's
  send window (rails.deadline.send_window) closed before the request's first byte was written.

Every request has ONE total deadline, `timeout_ms` (INTERLOCK_RAIL_TIMEOUT_MS, shorter than the lease),
covering connect (through a proxy: its connect, the CONNECT and the TLS handshake), the write and the read
of the whole response; it is enforced at the socket (rails.wire), so a rail that trickles its answer a
byte at a time cannot outlive it. Running out before the first byte
is NOT_SENT; running out once the request may have left is AMBIGUOUS.

The client never retries, at any layer (I3): the wire writes each request once and no method loops.
A retry is a ledger decision, made only from CONFIRMED_NOT_APPLIED.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TypeVar

from pydantic import ValidationError

from interlock import clock
from interlock.config import Settings
from interlock.errors import ConfigError, InvalidInput
from rails.checks import MAX_PAGE, entity_id, page_args
from rails.checks import amount as amount_arg
from rails.deadline import SendWindowClosed, check_send_window
from rails.models import Balance, BankingBalance, FundAccount, Page, Payment, Payout, RailEntity, Refund, Settlement
from rails.wire import Answer, Lost, NotSent, Wire, encode_json

logger = logging.getLogger(__name__)

ID_NOT_FOUND = "The id provided does not exist"
PAYOUT_KEY_HEADER = "X-Payout-Idempotency"
PAYOUT_KEY = re.compile(r"^[A-Za-z0-9_\- ]{4,36}$")  # its values (SPEC §18)
E = TypeVar("E", bound=RailEntity)


class RailErrorKind(enum.StrEnum):
    REJECTED = "REJECTED"
    AMBIGUOUS = "AMBIGUOUS"
    NOT_SENT = "NOT_SENT"


class RailError(Exception):
    """Raised when a rail call does not return a usable 2xx; `kind` says what is known about the money."""

    def __init__(
        self,
        kind: RailErrorKind,
        message: str,
        *,
        method: str,
        path: str,
        http_status: int | None = None,
        code: str | None = None,
        description: str | None = None,
        field: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(f"{kind} {method} {path}: {message}")
        self.kind = kind
        self.method = method
        self.path = path
        self.http_status = http_status
        self.code = code
        self.description = description
        self.field = field
        self.body = body

    @property
    def not_found(self) -> bool:
        """The rail said the id does not exist (Razorpay answers 400, not 404; SPEC §14)."""
        return self.kind is RailErrorKind.REJECTED and self.description == ID_NOT_FOUND


class RazorpayClient:
    """One rail account: origin URL (the client appends /v1/...), basic-auth key, one total deadline per call.

    *connect_timeout_ms* only caps the connect within that deadline. A *wire* given for tests (anything with
    `exchange` and `close` like rails.wire.Wire) is used as is: the deadline and the send window are then
    only as good as that object makes them.
    """

    def __init__(
        self,
        base_url: str,
        key_id: str,
        key_secret: str,
        *,
        timeout_ms: int = 10_000,
        connect_timeout_ms: int | None = None,
        wire: Wire | None = None,
    ) -> None:
        origin = base_url.rstrip("/")
        # SPEC §14: the setting is the origin; tolerate a trailing /v1 rather than calling /v1/v1/...
        self.origin = origin[: -len("/v1")] if origin.endswith("/v1") else origin
        self.timeout_s = timeout_ms / 1000
        connect_s = min(connect_timeout_ms if connect_timeout_ms is not None else 5000, timeout_ms) / 1000
        self._wire = wire or Wire(self.origin, key_id, key_secret, connect_timeout_s=connect_s,
                                  user_agent="interlock-rail-client/0.1")  # fmt: skip

    @classmethod
    def from_settings(cls, settings: Settings) -> RazorpayClient:
        """Client from INTERLOCK_RAIL_URL / _KEY_ID / _KEY_SECRET / _TIMEOUT_MS; ConfigError names what is missing."""
        try:
            return cls(
                settings.require("rail_url"),
                settings.require("rail_key_id"),
                settings.require("rail_key_secret"),
                timeout_ms=settings.rail_timeout_ms,
            )
        except ValueError as exc:
            raise ConfigError(f"INTERLOCK_RAIL_URL: {exc}", variable="INTERLOCK_RAIL_URL") from exc

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> RazorpayClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- payments and refunds ------------------------------------------------------------------

    def fetch_payment(self, payment_id: str) -> Payment:
        body = self._request("GET", f"/v1/payments/{entity_id(payment_id, 'payment_id')}")
        return _parse(Payment, body, "GET", "/v1/payments/{id}")

    def create_refund(
        self,
        payment_id: str,
        amount: int | None,
        *,
        speed: str | None = None,
        notes: Mapping[str, Any] | None,
        receipt: str | None,
        idempotency_key: str | None,
    ) -> Refund:
        """POST /v1/payments/{id}/refund with exactly the stamps the caller passes (the client adds none).

        *amount* None refunds the full remaining amount. A retry must pass the same arguments, so the
        rail sees the same body under the same idempotency key (SPEC §14).
        """
        path = f"/v1/payments/{entity_id(payment_id, 'payment_id')}/refund"
        payload: dict[str, Any] = {}
        if amount is not None:
            payload["amount"] = amount_arg(amount)
        if speed is not None:
            payload["speed"] = speed
        if notes:
            payload["notes"] = dict(notes)
        if receipt is not None:
            payload["receipt"] = receipt
        headers = {"X-Refund-Idempotency": idempotency_key} if idempotency_key is not None else None
        body = self._request("POST", path, json=payload, headers=headers)
        return _parse(Refund, body, "POST", path)

    def fetch_refund(self, refund_id: str) -> Refund:
        body = self._request("GET", f"/v1/refunds/{entity_id(refund_id, 'refund_id')}")
        return _parse(Refund, body, "GET", "/v1/refunds/{id}")

    def list_refunds_for_payment(
        self, payment_id: str, *, count: int = MAX_PAGE, skip: int = 0, from_: int | None = None, to: int | None = None
    ) -> Page[Refund]:
        """One page, newest first; page on with skip until `page.exhausted` (SPEC §9)."""
        params = page_args(count, skip)
        if from_ is not None:
            params["from"] = from_
        if to is not None:
            params["to"] = to
        path = f"/v1/payments/{entity_id(payment_id, 'payment_id')}/refunds"
        return _page(Refund, self._request("GET", path, params=params), count, skip, path)

    def list_refunds(self, *, count: int = MAX_PAGE, skip: int = 0) -> Page[Refund]:
        return _page(Refund, self._request("GET", "/v1/refunds", params=page_args(count, skip)), count, skip, "")

    # -- instant settlements and balance -------------------------------------------------------

    def create_instant_settlement(
        self,
        amount: int | None = None,
        *,
        settle_full_balance: bool = False,
        description: str | None = None,
        notes: Mapping[str, Any] | None,
    ) -> Settlement:
        """POST /v1/settlements/ondemand: exactly one of *amount* or settle_full_balance=True.

        Razorpay rejects unknown fields here and has no receipt, so the stamp travels in notes only.
        """
        if (amount is None) == (not settle_full_balance):
            raise InvalidInput("pass exactly one of amount or settle_full_balance=True", field="amount")
        payload: dict[str, Any] = (
            {"settle_full_balance": True} if settle_full_balance else {"amount": amount_arg(amount)}
        )
        if description is not None:
            payload["description"] = description
        if notes:
            payload["notes"] = dict(notes)
        body = self._request("POST", "/v1/settlements/ondemand", json=payload)
        return _parse(Settlement, body, "POST", "/v1/settlements/ondemand")

    def fetch_instant_settlement(self, settlement_id: str) -> Settlement:
        body = self._request("GET", f"/v1/settlements/ondemand/{entity_id(settlement_id, 'settlement_id')}")
        return _parse(Settlement, body, "GET", "/v1/settlements/ondemand/{id}")

    def list_instant_settlements(self, *, count: int = 10, skip: int = 0) -> Page[Settlement]:
        path = "/v1/settlements/ondemand"
        return _page(Settlement, self._request("GET", path, params=page_args(count, skip)), count, skip, path)

    def fetch_balance(self) -> Balance:
        """GET /v1/balance — a sandbox-only endpoint (the real API has no such call)."""
        return _parse(Balance, self._request("GET", "/v1/balance"), "GET", "/v1/balance")

    # -- RazorpayX payouts (SPEC §18) -----------------------------------------------------------

    def create_payout(
        self,
        *,
        account_number: str,
        fund_account_id: str,
        amount: int,
        currency: str,
        mode: str,
        purpose: str,
        queue_if_low_balance: bool,
        reference_id: str,
        narration: str | None,
        notes: Mapping[str, Any] | None,
        idempotency_key: str,
    ) -> Payout:
        """POST /v1/payouts with exactly the stamps the caller passes. `X-Payout-Idempotency` is mandatory; a retry
        must pass the same arguments and key, so the rail sees the same body under the same key and replays the
        first payout (a different body under that key is refused 400; one while the first is processing, 409)."""
        if not PAYOUT_KEY.match(idempotency_key or ""):
            raise InvalidInput("the payout idempotency key is 4-36 letters, digits, hyphens, underscores or spaces",
                               field="idempotency_key")  # fmt: skip
        payload: dict[str, Any] = {
            "account_number": account_number, "fund_account_id": entity_id(fund_account_id, "fund_account_id"),
            "amount": amount_arg(amount), "currency": currency, "mode": mode, "purpose": purpose,
            "queue_if_low_balance": queue_if_low_balance, "reference_id": reference_id,
        }  # fmt: skip
        if narration is not None:
            payload["narration"] = narration
        if notes:
            payload["notes"] = dict(notes)
        body = self._request("POST", "/v1/payouts", json=payload, headers={PAYOUT_KEY_HEADER: idempotency_key})
        return _parse(Payout, body, "POST", "/v1/payouts")

    def fetch_payout(self, payout_id: str) -> Payout:
        body = self._request("GET", f"/v1/payouts/{entity_id(payout_id, 'payout_id')}")
        return _parse(Payout, body, "GET", "/v1/payouts/{id}")

    def list_payouts(self, account_number: str, *, reference_id: str | None = None, status: str | None = None,
                     count: int = MAX_PAGE, skip: int = 0) -> Page[Payout]:  # fmt: skip
        """One page of the account's payouts, newest first (by `reference_id`, `status` when given); page on with
        skip until `page.exhausted` — only an exhausted list is absence (ADR 0004)."""
        params: dict[str, Any] = {"account_number": account_number, **page_args(count, skip)}
        if reference_id is not None:
            params["reference_id"] = reference_id
        if status is not None:
            params["status"] = status
        return _page(Payout, self._request("GET", "/v1/payouts", params=params), count, skip, "/v1/payouts")

    def cancel_payout(self, payout_id: str) -> Payout:
        """POST /v1/payouts/{id}/cancel: a `queued` payout only (the rail refuses any other, 400)."""
        path = f"/v1/payouts/{entity_id(payout_id, 'payout_id')}/cancel"
        return _parse(Payout, self._request("POST", path, json={}), "POST", "/v1/payouts/{id}/cancel")

    def fetch_fund_account(self, fund_account_id: str) -> FundAccount:
        body = self._request("GET", f"/v1/fund_accounts/{entity_id(fund_account_id, 'fund_account_id')}")
        return _parse(FundAccount, body, "GET", "/v1/fund_accounts/{id}")

    def fetch_banking_balance(self, account_number: str) -> BankingBalance:
        """The balance of the RazorpayX account *account_number*, from `GET /v1/banking_balances` (which lists
        every account of the business); RailError REJECTED when the rail does not list that account."""
        body = self._request("GET", "/v1/banking_balances")
        items = body.get("items")
        for raw in items if isinstance(items, list) else []:
            if isinstance(raw, dict) and raw.get("account_number") == account_number:
                return _parse(BankingBalance, raw, "GET", "/v1/banking_balances")
        raise RailError(RailErrorKind.REJECTED, f"the rail lists no banking balance for account {account_number}",
                        method="GET", path="/v1/banking_balances")  # fmt: skip

    # -- transport and classification ----------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        started = clock.monotonic()
        try:
            check_send_window()  # a window already closed stays closed: do not even connect
            answer = self._wire.exchange(method, path, deadline=started + self.timeout_s, headers=headers,
                                         params=params, body=None if json is None else encode_json(json))  # fmt: skip
        except (SendWindowClosed, NotSent) as exc:
            # The window closed, or a refusal, timeout or lack of time before the first byte: no byte left.
            raise RailError(RailErrorKind.NOT_SENT, str(exc), method=method, path=path) from exc
        except Lost as exc:
            # A timeout (the total deadline included), reset or unreadable answer after the first byte.
            raise RailError(RailErrorKind.AMBIGUOUS, str(exc), method=method, path=path) from exc
        except ValueError as exc:
            # The payload cannot be written as JSON (NaN, a non-string key): refused here, nothing left.
            raise RailError(RailErrorKind.NOT_SENT, f"unencodable request body: {exc}", method=method,
                            path=path) from exc  # fmt: skip
        logger.debug("%s %s -> %s in %s ms", method, path, answer.status, int((clock.monotonic() - started) * 1000))
        return _classify(answer, method, path)


def _classify(response: Answer, method: str, path: str) -> dict[str, Any]:
    status = response.status
    text = response.text
    try:
        body = response.json()
    except ValueError:
        body = None
    if 200 <= status < 300:
        if not isinstance(body, dict):
            raise RailError(
                RailErrorKind.AMBIGUOUS, f"unreadable {status} body", method=method, path=path, http_status=status,
                body=text[:2000],
            )  # fmt: skip
        return body
    error = body.get("error") if isinstance(body, dict) else None
    fields: dict[str, Any] = {"method": method, "path": path, "http_status": status, "body": text[:2000]}
    if isinstance(error, dict):
        fields.update(code=error.get("code"), description=error.get("description"), field=error.get("field"))
    # 409: the first request with this idempotency key is still running — it may yet apply. 429: the rail
    # is shedding load (SPEC §18) and did not decide; what it did with the request is for a list read to say.
    # 408 and non-Razorpay 4xx bodies come from something in between, not from the rail's decision.
    # A 4xx about the payout idempotency key: the key was checked here before it was sent, so the rail is saying
    # the key was already used with another body — a payout exists under it, which is not a refusal.
    refusal = isinstance(error, dict) and bool(error.get("code")) and error.get("field") != PAYOUT_KEY_HEADER
    if 400 <= status < 500 and status not in (408, 409, 429) and refusal:
        raise RailError(RailErrorKind.REJECTED, f"{status} {fields.get('description')}", **fields)
    raise RailError(RailErrorKind.AMBIGUOUS, f"{status} {_snippet(text)}", **fields)


def _parse(model: type[E], body: dict[str, Any], method: str, path: str) -> E:
    try:
        result: E = model.from_raw(body)
    except ValidationError as exc:
        # A 2xx we cannot read may still have moved money: ambiguous, never "failed".
        raise RailError(
            RailErrorKind.AMBIGUOUS, f"2xx body is not a {model.__name__}: {exc.errors()[:1]}", method=method,
            path=path, body=str(body)[:2000],
        ) from exc  # fmt: skip
    return result


def _page(model: type[E], body: dict[str, Any], count: int, skip: int, path: str) -> Page[E]:
    items = body.get("items")
    if not isinstance(items, list):
        raise RailError(RailErrorKind.AMBIGUOUS, "collection without items", method="GET", path=path)
    parsed = [_parse(model, item, "GET", path) for item in items]
    return Page[model](items=parsed, requested_count=count, skip=skip, raw=body)  # type: ignore[valid-type]


def _snippet(text: str) -> str:
    return " ".join(text.split())[:120]
