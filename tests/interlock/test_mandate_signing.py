"""Ed25519 detached signatures over the mandate's canonical JSON, enforced at load when keys are configured."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from interlock.cli import cli
from interlock.config import load_settings
from interlock.errors import MandateError
from interlock.mandate import (
    generate_keypair,
    load_mandate,
    load_mandates_from_settings,
    sign_mandate,
    signature_path,
    verify_mandate_signature,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "mandate.example.yaml"


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "k.key", tmp_path / "k.pub"
    generate_keypair(private, public)
    return private, public


@pytest.fixture
def mandate(tmp_path: Path) -> Path:
    path = tmp_path / "mandate.yaml"
    path.write_text(EXAMPLE.read_text())
    return path


def test_sign_then_verify_round_trip(keys: tuple[Path, Path], mandate: Path) -> None:
    private, public = keys
    sig = sign_mandate(mandate, private)
    assert sig == signature_path(mandate) == mandate.with_name("mandate.yaml.sig")
    assert json.loads(sig.read_text())["mandate_hash"] == load_mandate(mandate).mandate_hash
    assert verify_mandate_signature(mandate, [public])
    assert load_mandate(mandate, pubkeys=[public]).agent_id == "agent_demo"


def test_private_key_is_owner_only_and_never_overwritten(keys: tuple[Path, Path]) -> None:
    private, public = keys
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    with pytest.raises(MandateError, match="already exists"):
        generate_keypair(private, public)


def test_reformatting_the_yaml_keeps_the_signature_valid(keys: tuple[Path, Path], mandate: Path) -> None:
    private, public = keys
    sign_mandate(mandate, private)
    mandate.write_text("# reviewed again\n" + mandate.read_text().replace("{reversibility: reversible}",
                                                                          "{ reversibility: 'reversible' }"))
    assert verify_mandate_signature(mandate, [public])


def test_tampered_mandate_is_refused_at_load(keys: tuple[Path, Path], mandate: Path) -> None:
    private, public = keys
    sign_mandate(mandate, private)
    mandate.write_text(mandate.read_text().replace("max_amount_minor: 500000", "max_amount_minor: 5000000"))
    assert not verify_mandate_signature(mandate, [public])
    with pytest.raises(MandateError, match="bad signature.*edited after signing"):
        load_mandate(mandate, pubkeys=[public])
    # Without configured keys the same file still loads: signing is enforced only where keys are configured.
    assert load_mandate(mandate).agent_id == "agent_demo"


def test_unsigned_mandate_is_refused_when_pubkeys_are_configured(keys: tuple[Path, Path], mandate: Path) -> None:
    _, public = keys
    with pytest.raises(MandateError, match="unsigned"):
        load_mandate(mandate, pubkeys=[public])
    with pytest.raises(MandateError, match="unsigned"):
        load_mandates_from_settings(load_settings(mandate=mandate, mandate_pubkeys=f" {public} ,"))


def test_signature_by_another_key_is_refused(tmp_path: Path, keys: tuple[Path, Path], mandate: Path) -> None:
    other_private, other_public = tmp_path / "o.key", tmp_path / "o.pub"
    generate_keypair(other_private, other_public)
    sign_mandate(mandate, other_private)
    with pytest.raises(MandateError, match="does not verify with any configured key"):
        load_mandate(mandate, pubkeys=[keys[1]])
    # Any one of several configured keys suffices (key rotation).
    assert load_mandate(mandate, pubkeys=[keys[1], other_public]).agent_id == "agent_demo"


def test_garbage_signature_file_is_refused(keys: tuple[Path, Path], mandate: Path) -> None:
    signature_path(mandate).write_text("not json")
    with pytest.raises(MandateError, match="not an Interlock mandate signature"):
        load_mandate(mandate, pubkeys=[keys[1]])


def test_configured_pubkey_that_does_not_exist_is_named(tmp_path: Path, mandate: Path) -> None:
    with pytest.raises(MandateError, match="INTERLOCK_MANDATE_PUBKEYS names .*missing.pub"):
        load_mandates_from_settings(load_settings(mandate=mandate, mandate_pubkeys=str(tmp_path / "missing.pub")))


def test_cli_keygen_sign_verify_and_check(tmp_path: Path, mandate: Path) -> None:
    runner = CliRunner()
    prefix = str(tmp_path / "ops")
    assert runner.invoke(cli, ["mandate", "keygen", "--out", prefix]).exit_code == 0
    signed = runner.invoke(cli, ["mandate", "sign", "--key", prefix + ".key", str(mandate)])
    assert signed.exit_code == 0, signed.output
    ok = runner.invoke(cli, ["mandate", "verify", "--pubkey", prefix + ".pub", str(mandate)])
    assert ok.exit_code == 0 and "signature ok" in ok.output
    check = runner.invoke(cli, ["mandate", "check", "--pubkey", prefix + ".pub", str(mandate)])
    assert check.exit_code == 0 and load_mandate(mandate).mandate_hash in check.output

    mandate.write_text(mandate.read_text().replace("max_calls: 40", "max_calls: 400"))
    bad = runner.invoke(cli, ["mandate", "verify", "--pubkey", prefix + ".pub", str(mandate)])
    assert bad.exit_code == 1 and "signature BAD" in bad.output


def test_cli_check_reports_an_invalid_mandate_and_pin_drift(tmp_path: Path, mandate: Path) -> None:
    runner = CliRunner()
    broken = tmp_path / "broken.yaml"
    broken.write_text(mandate.read_text().replace("max_calls: 40", "max_calls: 40.0"))
    result = runner.invoke(cli, ["mandate", "check", str(broken)])
    assert result.exit_code == 1 and "limits.windows[0].max_calls" in result.output

    drifted = tmp_path / "drifted.yaml"
    text = mandate.read_text()
    pin = load_mandate(mandate).pin("create_refund")
    assert pin is not None
    drifted.write_text(text.replace(pin, "f" * 64))
    result = runner.invoke(cli, ["mandate", "check", str(drifted)])
    assert result.exit_code == 1 and "create_refund: DRIFT" in result.output
