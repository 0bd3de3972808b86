"""Audit bundles: the hash chain and the ledger rows it covers, exported so an auditor can verify them
with nothing but this file and Python — no ledger, no Redis, no trust in the exporter's database.

A bundle is a directory (or a .tar of one) holding one JSONL file per table and `manifest.json` with
each file's sha256 and row count and the chain head (seq, hash) at export time. Verification:
1. the chain, record by record (`ledger.audit.verify_records`): an edited, deleted or reordered
   record is named by the first seq that does not verify, and so is a payload_json that is not byte for
   byte the canonical JSON that was hashed (a duplicate key); a cut tail is caught against the head;
2. each file against the manifest's digest (which proves nothing alone: the manifest is unsigned);
3. every field of every covered row against the chain (`ops.bundle_rows`, ADR 0020): each row is rebuilt
   from the records alone and must equal the bundle's, column for column; a row without its record, a
   record without its row (an intent, attempt, decision, finding or operation_ref binding deleted from
   the rows) and a column the chain does not bind are refused.
So the rows say only what the chain committed to, and the chain is as good as its head: the manifest is
not signed, so compare its printed head hash with one published out of band (e.g. the
`interlock audit verify --ledger` output kept by the auditor) to rule out a re-chained forgery.
"""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interlock.canonical import sha256_hex
from interlock.clock import now_ms
from ledger import audit, operator
from ops import bundle_rows

FORMAT = "interlock-audit-bundle-v1"
MANIFEST = "manifest.json"
TABLE_FILES = {table: f"{table}.jsonl" for table in ("audit_log", *operator.SNAPSHOT_TABLES)}


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in rows).encode("utf-8")


def export_bundle(conn: sqlite3.Connection, out: Path) -> dict[str, Any]:
    """Write the bundle to *out*: a tar when the name ends in .tar, else a directory. Returns the manifest."""
    tables = operator.snapshot(conn)
    head = tables["audit_head"][0] if tables["audit_head"] else None
    blobs = {TABLE_FILES[t]: _jsonl(tables[t]) for t in TABLE_FILES}
    exported_at = now_ms()
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "exported_at": exported_at,
        "head": {"seq": int(head["seq"]), "hash": str(head["hash"])} if head else None,
        "files": {name: {"sha256": sha256_hex(blob), "rows": len(tables[t])}
                  for (t, name), blob in zip(TABLE_FILES.items(), blobs.values(), strict=True)},
    }  # fmt: skip
    blobs[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    if out.suffix == ".tar":
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w") as tar:
            for name, blob in blobs.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(blob), exported_at // 1000, 0o644
                tar.addfile(info, io.BytesIO(blob))
    else:
        out.mkdir(parents=True, exist_ok=True)
        for name, blob in blobs.items():
            (out / name).write_bytes(blob)
    return manifest


@dataclass
class BundleReport:
    records: int = 0
    head: dict[str, Any] | None = None
    first_bad_seq: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def read_bundle(path: Path) -> dict[str, bytes]:
    if path.is_dir():
        return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    if not tarfile.is_tarfile(path):
        raise ValueError(f"{path} is neither a bundle directory nor a tar file")
    files: dict[str, bytes] = {}
    with tarfile.open(path, "r") as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:  # read into memory: nothing from the bundle touches the filesystem
                files[Path(member.name).name] = extracted.read()
    return files


def verify_bundle(path: Path) -> BundleReport:
    report = BundleReport()
    files = read_bundle(path)
    try:
        manifest = json.loads(files[MANIFEST])
    except (KeyError, ValueError) as exc:
        report.problems.append(f"{MANIFEST} is missing or unreadable: {exc}")
        return report
    if manifest.get("format") != FORMAT:
        report.problems.append(f"unknown bundle format {manifest.get('format')!r} (expected {FORMAT})")
        return report
    report.head = manifest.get("head")
    tables: dict[str, list[dict[str, Any]]] = {}
    for table, name in TABLE_FILES.items():
        try:
            tables[table] = [json.loads(line) for line in files.get(name, b"").decode("utf-8").splitlines() if line]
        except ValueError as exc:
            report.problems.append(f"{name}: not valid JSON lines ({exc})")
            tables[table] = []
    records = tables["audit_log"]
    report.records = len(records)
    head = (int(report.head["seq"]), str(report.head["hash"])) if report.head else None
    bad = audit.verify_records(records, head=head)
    if bad is not None:
        report.first_bad_seq = bad
        report.problems.append(f"audit chain broken at seq {bad}: {_describe(records, bad)}")
    for name, meta in manifest.get("files", {}).items():
        if sha256_hex(files.get(name, b"")) != meta.get("sha256"):
            report.problems.append(f"{name} does not match the sha256 in {MANIFEST} (edited, truncated or missing)")
    if bad is None:  # rows are judged against the chain only once the chain itself is trusted
        report.problems.extend(bundle_rows.check_rows(records, tables))
    return report


def _describe(records: list[dict[str, Any]], seq: int) -> str:
    at = next((i for i, r in enumerate(records) if int(r.get("seq", -1)) == seq), None)
    if at is None:
        return "record missing (deleted, or the records are out of order)"
    if at != seq - 1:
        return f"record found at line {at + 1}, not line {seq} (deleted or reordered records)"
    if audit.canonical_payload(records[at].get("payload_json")) is None:
        return f"the {records[at].get('kind')} record's payload_json is not the canonical JSON the chain hashes " \
               "(a duplicate key, another spelling of it, or not JSON)"
    return f"the {records[at].get('kind')} record does not hash to its stored value (edited)"
