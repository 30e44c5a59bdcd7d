"""CTXLAKE_S3_*: the optional S3-compatible object store for rendered cache files.

Read once by settings.py into a named storage, STORAGES["artifacts"] (django-storages'
S3Storage), which fleet.artifact_store uploads to and reads from. Unset (the default),
renders stay in Postgres and nothing here is imported beyond this module.

The access keys go to the storage's OPTIONS only: they are never part of an error
message (a bad key is reported without its value), and Django's exception reporter hides
settings whose names say KEY or SECRET, nested ones included.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ctxlake_site.env import BadSetting, env_match, env_str

BACKEND = "storages.backends.s3.S3Storage"
_VARS = (
    "CTXLAKE_S3_BUCKET", "CTXLAKE_S3_ENDPOINT_URL", "CTXLAKE_S3_REGION",
    "CTXLAKE_S3_ACCESS_KEY_ID", "CTXLAKE_S3_SECRET_ACCESS_KEY", "CTXLAKE_S3_PREFIX",
)
# S3's bucket naming rules (lower case, digits, dots and dashes, 3-63 characters).
_BUCKET = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"
# scheme, host (a name, IPv4 or [IPv6]) and port only: no user:password@, no path
_ENDPOINT = r"https?://(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])" \
            r"(?::\d{1,5})?/?"
# "a/b/": folders ending in "/", never "." or ".." (a key must not climb out of the prefix)
_PREFIX = r"(?:(?!\.\.?/)[A-Za-z0-9._-]{1,64}/){0,8}"
_KEY_CHARS = r"[\x21-\x7e]{1,256}"  # printable, no spaces


@dataclass(frozen=True)
class ObjectStore:
    """The storage's STORAGES entry, and the prefix every object key starts with."""

    storage: dict[str, Any]
    prefix: str


def from_env() -> ObjectStore | None:
    """The configured store, None when CTXLAKE_S3_BUCKET is unset; BadSetting on a bad or
    half-given configuration (a store variable without a bucket, one key without the other).
    """
    if "CTXLAKE_S3_BUCKET" not in os.environ:
        stray = next((name for name in _VARS if name in os.environ), None)
        if stray is not None:
            raise BadSetting(stray, _hidden(stray), "only with CTXLAKE_S3_BUCKET set "
                             "(unset every CTXLAKE_S3_* variable to keep renders in Postgres)")
        return None
    bucket = env_match("CTXLAKE_S3_BUCKET", "", _BUCKET,
                       "an S3 bucket name (3-63 of a-z, 0-9, '.' and '-')")
    endpoint = env_match(
        "CTXLAKE_S3_ENDPOINT_URL", "", _ENDPOINT,
        "an http:// or https:// URL of the store: scheme, host and port only "
        "(no credentials, no path); unset it for AWS S3",
    )
    region = env_match("CTXLAKE_S3_REGION", "", r"[a-z0-9-]{1,32}",
                       "a region name such as us-east-1")
    prefix = env_match("CTXLAKE_S3_PREFIX", "", _PREFIX,
                       "folders each ending in '/' (letters, digits, '.', '_', '-'), e.g. ctxlake/")
    return ObjectStore(_storage(bucket, endpoint, region, _keys()), prefix)


def _keys() -> dict[str, str]:
    """Both access keys or neither (then boto3 finds credentials itself: an instance role)."""
    pair = {"CTXLAKE_S3_ACCESS_KEY_ID": os.environ.get("CTXLAKE_S3_ACCESS_KEY_ID"),
            "CTXLAKE_S3_SECRET_ACCESS_KEY": os.environ.get("CTXLAKE_S3_SECRET_ACCESS_KEY")}
    given = {name: value for name, value in pair.items() if value is not None}
    for name, value in given.items():
        if not re.fullmatch(_KEY_CHARS, value):
            raise BadSetting(name, _hidden(name), "printable characters without spaces")
    if len(given) == 1:
        (name,) = given
        raise BadSetting(name, _hidden(name), "set with the other access key, or neither")
    if not given:
        return {}
    return {"access_key": given["CTXLAKE_S3_ACCESS_KEY_ID"],
            "secret_key": given["CTXLAKE_S3_SECRET_ACCESS_KEY"]}


def _hidden(name: str) -> str:
    """What an error may show of a variable's value: nothing, for the keys."""
    return "(hidden)" if "KEY" in name else env_str(name)


def _storage(bucket: str, endpoint: str, region: str, keys: dict[str, str]) -> dict[str, Any]:
    from botocore.config import Config  # only a process with a store configured needs it

    return {
        "BACKEND": BACKEND,
        "OPTIONS": {
            "bucket_name": bucket,
            "endpoint_url": endpoint.rstrip("/") or None,
            "region_name": region or None,
            **keys,
            "file_overwrite": True,  # a key is its content's hash: the same bytes again
            "default_acl": None,  # private: bodies are served by the API, never by the store
            "querystring_auth": False,
            # a store that does not answer fails the render in seconds, not minutes
            "client_config": Config(
                s3={"addressing_style": "path" if endpoint else "auto"},
                signature_version="s3v4",
                connect_timeout=5,
                read_timeout=30,
                retries={"max_attempts": 3, "mode": "standard"},
            ),
        },
    }
