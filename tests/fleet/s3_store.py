"""An S3 store for tests: moto's S3 server on 127.0.0.1 over real HTTP, and how to switch
it on and off as a restart with the CTXLAKE_S3_* variables would (the `s3` fixture is in
conftest.py)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from ctxlake_site import object_store
from fleet import artifact_store
from fleet.models import Fleet

PREFIX = "ctx/"
# Keys no secret pattern recognises (a MinIO user name can be any word), so that a leak
# shows up in any output even where the shared redactor would have masked an AWS-shaped one.
ACCESS_KEY = "ctxlakeuser" + secrets.token_hex(8)
SECRET_KEY = secrets.token_urlsafe(30)


@dataclass
class S3:
    """One bucket on a running store, and a plain boto3 client to look inside it."""

    server: ThreadedMotoServer
    endpoint: str
    bucket: str

    def client(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def objects(self) -> set[str]:
        found = self.client().list_objects_v2(Bucket=self.bucket).get("Contents", [])
        return {o["Key"] for o in found}

    def body(self, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read())


def start(port: int = 0) -> ThreadedMotoServer:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def configure(monkeypatch: pytest.MonkeyPatch, settings: Any, s3: S3 | None) -> None:
    """Switch the store on (or off, with None) as a restart with these variables would."""
    env = {"CTXLAKE_S3_BUCKET": s3.bucket, "CTXLAKE_S3_ENDPOINT_URL": s3.endpoint,
           "CTXLAKE_S3_REGION": "us-east-1", "CTXLAKE_S3_ACCESS_KEY_ID": ACCESS_KEY,
           "CTXLAKE_S3_SECRET_ACCESS_KEY": SECRET_KEY, "CTXLAKE_S3_PREFIX": PREFIX} if s3 else {}
    for name in object_store._VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    store = object_store.from_env()
    storages = {k: v for k, v in settings.STORAGES.items() if k != artifact_store.STORAGE}
    settings.STORAGES = {**storages, **({"artifacts": store.storage} if store else {})}
    settings.CTXLAKE_S3_PREFIX = store.prefix if store else ""


def object_key(fleet: Fleet, name: str, body: bytes) -> str:
    return f"{PREFIX}{fleet.pk}/{name}/{hashlib.sha256(body).hexdigest()}"
