"""The rail client through a forward proxy (ADR 0031, amendment of 2026-12-07), against the sandbox: over http
through proxy.py (a real proxy nobody on the team wrote) with the request in absolute form, over https through
proxy.py's CONNECT tunnel to a TLS front of the sandbox, and through a hostile proxy for the failures proxy.py
cannot be made to show. What each failure says about the money is the point: NOT_SENT only when no byte of the
request can have reached the rail."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rails.deadline import SendWindowClosed, send_window
from rails.razorpay import RailError, RailErrorKind, RazorpayClient
from rails.wire import Wire, encode_json
from sandbox.testing import SandboxProcess, free_port, wait_for
from tests.rails.certs import self_signed
from tests.rails.proxies import HostileProxy, ProxyPy, TlsFront, wait_for_log

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
                   "all_proxy")  # fmt: skip
USER, PASSWORD = "ops", "p@ss"  # the password needs percent-encoding in a URL


@pytest.fixture(autouse=True)
def _no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def proxy_py(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyPy]:
    with ProxyPy(tmp_path_factory.mktemp("proxy-py")) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def guarded_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyPy]:
    """proxy.py that answers 407 unless the request carries Proxy-Authorization for USER:PASSWORD."""
    with ProxyPy(tmp_path_factory.mktemp("proxy-py-auth"), basic_auth=f"{USER}:{PASSWORD}") as proxy:
        yield proxy


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_front(rail: SandboxProcess, certificate: tuple[Path, Path]) -> Iterator[TlsFront]:
    front = TlsFront(rail.port, *certificate)
    try:
        yield front
    finally:
        front.close()


@pytest.fixture
def trusting(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{PASSWORD.replace('@', '%40')}@")


def https_client(url: str, rail: SandboxProcess, proxy_url: str, tls: ssl.SSLContext, *,
                 timeout_ms: int = 5000) -> RazorpayClient:  # fmt: skip
    """A client of the https rail at *url*, trusting *tls*'s CA, with HTTPS_PROXY=*proxy_url* as its environment."""
    wire = Wire(url, rail.key_id, rail.key_secret, connect_timeout_s=5, user_agent="proxy-test", tls=tls,
                environ={"HTTPS_PROXY": proxy_url})  # fmt: skip
    return RazorpayClient(url, rail.key_id, rail.key_secret, timeout_ms=timeout_ms, wire=wire)


def refund(client: RazorpayClient, payment_id: str, sik: str) -> object:
    return client.create_refund(payment_id, 700, notes={"interlock_sik": sik}, receipt="ilk_" + sik,
                                idempotency_key="ilk_" + sik)  # fmt: skip


def failure(call: Callable[[], object]) -> tuple[RailError, float]:
    started = time.monotonic()
    with pytest.raises(RailError) as caught:
        call()
    return caught.value, time.monotonic() - started


# -- the normal path, through proxy.py ---------------------------------------------------------------------------


def test_an_http_rail_is_reached_through_http_proxy(rail: SandboxProcess, proxy_py: ProxyPy, payment, sik: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("HTTP_PROXY", proxy_py.url)
    payment_id = payment()
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000) as client:
        made = refund(client, payment_id, sik)
        assert client.fetch_payment(payment_id).amount == 100_000
    assert made.carries_stamp(sik) and rail.count_stamped(sik) == 1  # type: ignore[attr-defined]
    # proxy.py logs the request a connection opened with, and the rail's address it forwarded it to.
    wait_for_log(proxy_py, f"POST {rail.host}:{rail.port}/v1/payments/{payment_id}/refund - 200")


def test_an_https_rail_is_reached_through_a_connect_tunnel_with_tls_to_the_rail(
        rail: SandboxProcess, proxy_py: ProxyPy, tls_front: TlsFront, trusting: ssl.SSLContext, payment,
        sik: str) -> None:  # fmt: skip
    payment_id, handshakes, seen = payment(), tls_front.handshakes, len(tls_front.plaintext)
    with https_client(tls_front.url, rail, proxy_py.url, trusting) as client:
        made = refund(client, payment_id, sik)
        assert client.fetch_payment(payment_id).amount == 100_000
    assert made.carries_stamp(sik) and rail.count_stamped(sik) == 1  # type: ignore[attr-defined]
    wait_for_log(proxy_py, f"CONNECT localhost:{tls_front.port}")
    # One tunnel for both calls, TLS inside it verified and named for the rail (SNI), not for the proxy.
    assert tls_front.handshakes == handshakes + 1 and tls_front.server_names[-1] == "localhost"
    inside = bytes(tls_front.plaintext[seen:])
    assert inside.startswith(b"POST /v1/payments/%s/refund HTTP/1.1\r\n" % payment_id.encode())


def test_the_rails_certificate_is_verified_inside_the_tunnel(
        rail: SandboxProcess, proxy_py: ProxyPy, tls_front: TlsFront, payment, sik: str) -> None:  # fmt: skip
    payment_id, seen = payment(), len(tls_front.plaintext)
    with https_client(tls_front.url, rail, proxy_py.url, ssl.create_default_context()) as untrusting:
        error, _ = failure(lambda: refund(untrusting, payment_id, sik))
    # A handshake that fails is not request bytes: nothing of the refund reached the rail.
    assert error.kind is RailErrorKind.NOT_SENT and "CERTIFICATE_VERIFY_FAILED" in str(error)
    assert f"through proxy 127.0.0.1:{proxy_py.port} (HTTPS_PROXY)" in str(error)
    assert rail.count_stamped(sik) == 0 and len(tls_front.plaintext) == seen


def test_proxy_credentials_in_the_url_open_the_tunnel_and_never_reach_the_rail(
        rail: SandboxProcess, guarded_proxy: ProxyPy, tls_front: TlsFront, trusting: ssl.SSLContext, payment,
        sik: str) -> None:  # fmt: skip
    payment_id, connections, seen = payment(), tls_front.connections, len(tls_front.plaintext)
    with https_client(tls_front.url, rail, guarded_proxy.url, trusting) as anonymous:
        error, _ = failure(lambda: refund(anonymous, payment_id, sik))
    # The proxy refused the CONNECT: the rail was never asked for anything.
    assert error.kind is RailErrorKind.NOT_SENT and tls_front.connections == connections
    refused = f"proxy 127.0.0.1:{guarded_proxy.port} (HTTPS_PROXY) refused CONNECT localhost:{tls_front.port}: 407"
    assert refused in str(error) and "nothing was sent to the rail" in str(error)
    with https_client(tls_front.url, rail, with_credentials(guarded_proxy.url), trusting) as client:
        refund(client, payment_id, sik)
    assert rail.count_stamped(sik) == 1
    inside = bytes(tls_front.plaintext[seen:])
    assert b"Authorization: Basic " in inside and b"Proxy-Authorization" not in inside


def test_an_http_rails_request_carries_the_proxy_credentials(rail: SandboxProcess, guarded_proxy: ProxyPy,
                                                              payment, sik: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("http_proxy", with_credentials(guarded_proxy.url))
    payment_id = payment()
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000) as client:
        refund(client, payment_id, sik)
    assert rail.count_stamped(sik) == 1


def test_an_http_rails_request_the_proxy_refuses_after_it_was_written_is_ambiguous(
        rail: SandboxProcess, guarded_proxy: ProxyPy, payment, sik: str,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # In absolute form the whole request goes to the proxy before it answers: what the proxy then did with it
    # cannot be proved from here, so its 407 is not a rail's refusal (here it did not forward it).
    monkeypatch.setenv("HTTP_PROXY", guarded_proxy.url)
    payment_id = payment()
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000) as client:
        error, _ = failure(lambda: refund(client, payment_id, sik))
    assert error.kind is RailErrorKind.AMBIGUOUS and error.http_status == 407
    assert rail.count_stamped(sik) == 0


def test_a_proxy_that_cannot_reach_the_rail_refuses_the_tunnel_and_nothing_is_sent(
        rail: SandboxProcess, proxy_py: ProxyPy, trusting: ssl.SSLContext) -> None:  # fmt: skip
    with https_client(f"https://127.0.0.1:{free_port()}", rail, proxy_py.url, trusting) as client:
        error, _ = failure(lambda: client.fetch_payment("pay_NOWHERE"))
    assert error.kind is RailErrorKind.NOT_SENT
    assert f"proxy 127.0.0.1:{proxy_py.port} (HTTPS_PROXY) refused CONNECT 127.0.0.1:" in str(error)
    assert ": 502 Bad Gateway: nothing was sent to the rail" in str(error)


def test_no_proxy_sends_a_listed_rail_direct_and_loopback_is_not_bypassed_unless_listed(
        rail: SandboxProcess, payment, sik: str, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    payment_id, nobody = payment(), f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("HTTP_PROXY", nobody)
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=2000) as client:
        error, _ = failure(lambda: refund(client, payment_id, sik))
    # The sandbox on 127.0.0.1 is up, but the proxy named for it is not: nothing left, and the message says where.
    where = f"through proxy {nobody.removeprefix('http://')} (HTTP_PROXY): ConnectionRefusedError"
    assert error.kind is RailErrorKind.NOT_SENT and where in str(error) and rail.count_stamped(sik) == 0
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=2000) as client:
        refund(client, payment_id, sik)
    assert rail.count_stamped(sik) == 1


def test_the_send_window_is_checked_after_the_tunnel_and_the_handshake(
        rail: SandboxProcess, proxy_py: ProxyPy, tls_front: TlsFront, trusting: ssl.SSLContext, payment,
        sik: str) -> None:  # fmt: skip
    # The wire alone (the client would refuse a closed window before connecting): the tunnel is made and TLS is
    # up, then the request's first byte is refused, so the rail has a connection that carried nothing.
    payment_id, handshakes, seen = payment(), tls_front.handshakes, len(tls_front.plaintext)
    wire = Wire(tls_front.url, rail.key_id, rail.key_secret, connect_timeout_s=5, user_agent="proxy-test",
                tls=trusting, environ={"HTTPS_PROXY": proxy_py.url})  # fmt: skip
    path = f"/v1/payments/{payment_id}/refund"
    body = encode_json({"amount": 700, "notes": {"interlock_sik": sik}, "receipt": "ilk_" + sik})
    with send_window(time.monotonic() - 0.001), pytest.raises(SendWindowClosed):
        wire.exchange("POST", path, body=body, deadline=time.monotonic() + 5)
    wait_for(lambda: tls_front.handshakes == handshakes + 1, timeout=5)
    assert len(tls_front.plaintext) == seen and rail.count_stamped(sik) == 0
    with send_window(time.monotonic() + 60):
        assert wire.exchange("POST", path, body=body, deadline=time.monotonic() + 5).status == 200
    wire.close()
    assert tls_front.handshakes == handshakes + 2 and rail.count_stamped(sik) == 1


# -- what proxy.py cannot be made to do: a hostile proxy -----------------------------------------------------------


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_that_drops_the_connection_mid_answer_leaves_the_call_ambiguous(
        scheme: str, rail: SandboxProcess, tls_front: TlsFront, trusting: ssl.SSLContext, payment, sik: str,
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    payment_id = payment()
    # It cuts the first piece of the rail's answer that comes back once the refund is in the sandbox's journal.
    hostile = HostileProxy("drop_mid_answer", cut_when=lambda: rail.count_stamped(sik) == 1)
    try:
        if scheme == "http":
            monkeypatch.setenv("HTTP_PROXY", with_credentials(hostile.url))
            client = RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=5000)
        else:
            client = https_client(tls_front.url, rail, hostile.url, trusting)
        with client:
            error, _ = failure(lambda: refund(client, payment_id, sik))
    finally:
        hostile.close()
    assert hostile.dropped.is_set()
    # The refund was made; the client cannot know it, and must not say it was not sent.
    assert error.kind is RailErrorKind.AMBIGUOUS and rail.count_stamped(sik) == 1
    if scheme == "http":  # the request went to the proxy whole, in absolute form, with the proxy's credentials
        line = f"POST http://{rail.host}:{rail.port}/v1/payments/{payment_id}/refund HTTP/1.1\r\n"
        assert hostile.received.startswith(line.encode())
        assert b"\r\nProxy-Authorization: Basic " in hostile.received
    else:
        assert hostile.received.startswith(b"CONNECT localhost:%d HTTP/1.1\r\n" % tls_front.port)


@pytest.mark.parametrize(("mode", "said"), [("silent", "no answer to CONNECT localhost:"),
                                            ("black_hole", "handshake operation timed out")],
                         ids=["no-answer-to-connect", "no-tls-in-the-tunnel"])  # fmt: skip
def test_a_proxy_that_stalls_the_tunnel_is_not_sent_within_the_deadline(
        mode: str, said: str, rail: SandboxProcess, tls_front: TlsFront, trusting: ssl.SSLContext) -> None:  # fmt: skip
    hostile, connections = HostileProxy(mode), tls_front.connections
    try:
        with https_client(tls_front.url, rail, hostile.url, trusting, timeout_ms=400) as client:
            error, elapsed = failure(lambda: client.fetch_payment("pay_STALLED"))
    finally:
        hostile.close()
    # The CONNECT exchange and the handshake are inside the call's deadline, and neither is request bytes.
    assert error.kind is RailErrorKind.NOT_SENT and elapsed < 1.5
    assert f"through proxy 127.0.0.1:{hostile.port} (HTTPS_PROXY): TimeoutError: " in str(error) and said in str(error)
    assert tls_front.connections == connections
