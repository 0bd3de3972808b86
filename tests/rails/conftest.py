from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import pytest

from rails.razorpay import RazorpayClient
from sandbox.testing import SandboxProcess, start_sandbox

_ids = itertools.count(1)


@pytest.fixture(scope="session")
def rail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """One real sandbox process for the client tests; each test makes its own payments."""
    with start_sandbox(tmp_path_factory.mktemp("rail")) as sandbox:
        yield sandbox


@pytest.fixture(autouse=True)
def _no_faults_leak(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "rail" in request.fixturenames:
        request.getfixturevalue("rail").clear_faults()


@pytest.fixture
def client(rail: SandboxProcess) -> Iterator[RazorpayClient]:
    with RazorpayClient(rail.url, rail.key_id, rail.key_secret, timeout_ms=3000) as c:
        yield c


@pytest.fixture
def payment(rail: SandboxProcess) -> Callable[..., str]:
    def make(amount: int = 100_000, **extra: object) -> str:
        payment_id = f"pay_C{os.getpid()}x{next(_ids)}"
        rail.add_payment(payment_id, amount, **extra)
        return payment_id

    return make


@pytest.fixture
def sik() -> str:
    return f"CLIENTSIK{os.getpid():08d}{next(_ids):015d}"[:32]
