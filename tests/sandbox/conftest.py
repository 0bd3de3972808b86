from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator

import httpx
import pytest

from sandbox.testing import SandboxProcess, start_sandbox

_ids = itertools.count(1)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxProcess]:
    """One real sandbox process for the endpoint tests; each test makes its own payments."""
    with start_sandbox(tmp_path_factory.mktemp("sandbox")) as rail:
        yield rail


@pytest.fixture(autouse=True)
def _no_faults_leak(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "sandbox" in request.fixturenames:
        request.getfixturevalue("sandbox").clear_faults()


@pytest.fixture
def http(sandbox: SandboxProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, auth=(sandbox.key_id, sandbox.key_secret), timeout=10.0) as client:
        yield client


@pytest.fixture
def new_payment(sandbox: SandboxProcess) -> Callable[..., str]:
    """Create a fresh captured payment on the sandbox and return its id."""

    def make(amount: int = 100_000, **extra: object) -> str:
        payment_id = f"pay_T{os.getpid()}x{next(_ids)}"
        sandbox.add_payment(payment_id, amount, **extra)
        return payment_id

    return make


@pytest.fixture
def new_sik() -> Callable[[], str]:
    """A fresh stamp value per call (shaped like a SIK: 32 upper-case base32 characters)."""

    def make() -> str:
        return f"TESTSIK{os.getpid():08d}{next(_ids):017d}"[:32]

    return make
