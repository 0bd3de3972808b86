"""An S3 API on loopback for the machine-loss trials (issue 48 item 6): moto's server mode (PyPI `moto[server]`), a
real HTTP server speaking S3, started and stopped by pid. Litestream ships the ledger to it and `interlock shards
restore` reads it back, with credentials and endpoint set the way docs/operating.md tells an operator: the keys in
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the endpoint of an S3-compatible store in the replica URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from interlock.ports import free_port, port_in_use

BUCKET = "interlock-replicas"
REGION = "us-east-1"
# moto takes any keys; they are given to Litestream exactly as a real store's would be.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "interlock-trial-key", "AWS_SECRET_ACCESS_KEY": "interlock-trial-secret"}


class S3Server:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> S3Server:
        import boto3

        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        binary = Path(sys.executable).parent / "moto_server"
        log = (self.directory / "moto.log").open("wb")
        self.proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(self.port)], stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not port_in_use(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not listen on {self.port}: see {self.directory / 'moto.log'}")
            time.sleep(0.1)
        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, **_keys())
        s3.create_bucket(Bucket=BUCKET)
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """The replica URL an operator writes for an S3-compatible store: bucket and path, then the endpoint."""
        return f"s3://{BUCKET}/{path}?endpoint={self.endpoint}&region={REGION}&forcePathStyle=true"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)


def _keys() -> dict[str, str]:
    return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
