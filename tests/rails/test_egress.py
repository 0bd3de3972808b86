"""Which proxy the rail client goes through (rails.egress): the variables read as curl reads them, NO_PROXY's
matching, and a proxy URL's credentials. Pure functions of an environment mapping; the network side is
tests/rails/test_rail_through_proxy.py."""

from __future__ import annotations

import base64

import pytest

from interlock.errors import ConfigError
from rails.egress import Proxy, bypassed, connect_request, parse_proxy, proxy_for


def test_the_rails_scheme_picks_the_variable() -> None:
    environ = {"HTTPS_PROXY": "http://tls-proxy:3128", "HTTP_PROXY": "http://plain-proxy:8080"}
    assert proxy_for("https", "api.razorpay.com", environ) == Proxy("tls-proxy", 3128, None, "HTTPS_PROXY")
    assert proxy_for("http", "127.0.0.1", environ) == Proxy("plain-proxy", 8080, None, "HTTP_PROXY")
    assert proxy_for("https", "api.razorpay.com", {"HTTP_PROXY": "http://plain-proxy:8080"}) is None


def test_a_lower_case_variable_wins_even_when_it_is_empty() -> None:
    both = {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}
    assert proxy_for("https", "api.razorpay.com", both) == Proxy("lower", 1, None, "https_proxy")
    assert proxy_for("https", "api.razorpay.com", {**both, "https_proxy": ""}) is None
    # NO_PROXY too: a lower-case no_proxy that does not list the host hides an upper-case one that does.
    listed = {"HTTPS_PROXY": "http://upper:2", "NO_PROXY": "razorpay.com"}
    assert proxy_for("https", "api.razorpay.com", listed) is None
    assert proxy_for("https", "api.razorpay.com", {**listed, "no_proxy": "example.com"}) is not None


def test_no_scheme_means_http_and_no_port_means_80() -> None:
    assert parse_proxy("proxy.corp:3128", "HTTPS_PROXY") == Proxy("proxy.corp", 3128, None, "HTTPS_PROXY")
    assert parse_proxy("http://proxy.corp/", "HTTPS_PROXY") == Proxy("proxy.corp", 80, None, "HTTPS_PROXY")
    assert parse_proxy("http://[::1]:3128", "HTTPS_PROXY").host == "::1"
    assert str(parse_proxy("http://[::1]:3128", "HTTPS_PROXY")) == "proxy [::1]:3128 (HTTPS_PROXY)"


def test_credentials_in_the_url_become_basic_proxy_authorization_and_are_never_shown() -> None:
    proxy = parse_proxy("http://ops%40corp:p%3Ass@proxy.corp:3128", "HTTPS_PROXY")
    assert proxy.authorization == "Basic " + base64.b64encode(b"ops@corp:p:ss").decode()
    assert "p:ss" not in str(proxy) and "ops" not in str(proxy) and proxy.authorization not in repr(proxy)
    request = connect_request(proxy, "api.razorpay.com:443", "ua")
    assert request == (b"CONNECT api.razorpay.com:443 HTTP/1.1\r\nHost: api.razorpay.com:443\r\nUser-Agent: ua\r\n"
                       b"Proxy-Authorization: " + proxy.authorization.encode() + b"\r\n\r\n")  # fmt: skip
    assert b"Proxy-Authorization" not in connect_request(parse_proxy("proxy.corp:3128", "X"), "h:443", "ua")


@pytest.mark.parametrize("value", ["https://proxy.corp:3128", "socks5://proxy.corp:1080", "http://:3128",
                                   "http://secret:hunter2@proxy.corp:port"])  # fmt: skip
def test_a_proxy_the_client_cannot_use_is_refused_at_start_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        proxy_for("https", "api.razorpay.com", {"HTTPS_PROXY": value})
    assert caught.value.variable == "HTTPS_PROXY" and "HTTPS_PROXY" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(("host", "no_proxy", "direct"), [
    ("api.razorpay.com", "razorpay.com", True),  # a domain matches the names under it
    ("api.razorpay.com", ".razorpay.com", True),  # a leading dot changes nothing
    ("razorpay.com", ".razorpay.com", True),  # ... not even for the domain itself (curl ignores the dot)
    ("notrazorpay.com", "razorpay.com", False),  # only whole labels match
    ("api.razorpay.com", "api.razorpay.com.", True),  # trailing dots are ignored, on either side
    ("api.razorpay.com.", "api.razorpay.com", True),
    ("API.Razorpay.COM", "razorpay.com", True),  # names match whatever their case
    ("api.razorpay.com", " example.com ,\trazorpay.com ", True),  # blanks around entries are ignored
    ("api.razorpay.com", "example.com,,", False),
    ("api.razorpay.com", "*", True),  # the whole value "*" bypasses everything ...
    ("api.razorpay.com", "example.com,*", False),  # ... an entry "*" among others matches nothing (curl)
    ("api.razorpay.com", "*.razorpay.com", False),  # no globs: write razorpay.com
    ("api.razorpay.com", "razorpay.com:443", False),  # no ports: an entry is a name
    ("localhost", "", False),  # loopback is not bypassed unless listed (curl and httpx alike)
    ("127.0.0.1", "", False),
    ("localhost", "localhost", True),
    ("127.0.0.1", "localhost", False),  # names are not resolved to match addresses, nor the other way
    ("localhost", "127.0.0.1", False),
    ("127.0.0.1", "127.0.0.1", True),
    ("127.0.0.1", "10.0.0.0/8,127.0.0.0/8", True),  # CIDR ranges match addresses in them
    ("10.1.2.3", "10.0.0.0/16", False),
    ("::1", "::1", True),
    ("::1", "127.0.0.1", False),
    ("2001:db8::7", "2001:db8::/32", True),
])  # fmt: skip
def test_no_proxy_matches_as_curl_does(host: str, no_proxy: str, direct: bool) -> None:
    assert bypassed(host, no_proxy) is direct
    environ = {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": no_proxy}
    assert (proxy_for("https", host.lower(), environ) is None) is direct
