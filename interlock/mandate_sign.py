"""Ed25519 detached signatures of mandates (`<mandate>.sig`): the signature covers exactly the validated
mandate's canonical bytes, prefixed with SIGNING_CONTEXT. The PEM key helpers here are shared with the task
signer (interlock.task)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from interlock.canonical import sha256_hex
from interlock.errors import MandateError
from interlock.mandate_model import Mandate

SIGNING_CONTEXT = b"interlock-mandate-v1\n"  # domain separation: a mandate key signs nothing else
SIGNATURE_SUFFIX = ".sig"


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MandateError(f"{what} file {path} does not exist") from None
    except OSError as exc:
        raise MandateError(f"cannot read {what} file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise MandateError(f"{what} file {path} is not UTF-8 text") from None


def signature_path(mandate_path: Path) -> Path:
    return mandate_path.with_name(mandate_path.name + SIGNATURE_SUFFIX)


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256_hex(raw)[:16]


def generate_keypair(private_path: Path, public_path: Path) -> None:
    """Write a new Ed25519 key pair as PEM; the private key is created 0600 and nothing is overwritten."""
    for path in (private_path, public_path):
        if path.exists():
            raise MandateError(f"{path} already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    public_path.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def signature_problem(mandate: Mandate, mandate_path: Path, public_key_paths: list[Path]) -> str | None:
    """Why the signature of *mandate* (loaded from *mandate_path*) does not verify, or None when it does."""
    sig_path = signature_path(mandate_path)
    if not sig_path.exists():
        return f"it is unsigned: signing keys are configured but {sig_path} does not exist"
    try:
        record = json.loads(read_text(sig_path, "signature"))
        signature = base64.b64decode(record["signature"], validate=True)
    except (ValueError, KeyError, TypeError):
        return f"{sig_path} is not an Interlock mandate signature"
    keys = [load_public_key(path) for path in public_key_paths]
    for key in keys:
        try:
            key.verify(signature, SIGNING_CONTEXT + mandate.canonical_bytes)
            return None
        except InvalidSignature:
            continue
    signed_hash = record.get("mandate_hash")
    if isinstance(signed_hash, str) and signed_hash != mandate.mandate_hash:
        return (f"bad signature: {sig_path} was made for mandate_hash {signed_hash}, but the mandate now hashes to "
                f"{mandate.mandate_hash} (edited after signing?)")
    tried = ", ".join(map(str, public_key_paths))
    return f"bad signature: {sig_path} does not verify with any configured key ({tried})"


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(read_text(path, "private key").encode("ascii"), password=None)
    except (ValueError, TypeError) as exc:
        raise MandateError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise MandateError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(read_text(path, "public key").encode("ascii"))
    except ValueError as exc:
        raise MandateError(f"{path} is not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise MandateError(f"{path} is not an Ed25519 public key")
    return key
