"""Rendered cache files' bodies in an S3-compatible object store, when one is configured.

The store is Django's named storage "artifacts" (settings: CTXLAKE_S3_*, a django-storages
S3Storage); without it, `configured()` is False and bodies stay in Postgres. A body's key
is `<prefix><fleet id>/<name>/<sha256>`: content-addressed, so the same bytes are one
object, and a key is never rewritten with other bytes.

Rows (fleet.artifacts) say where each body is; this module only moves bytes:
1. `upload` runs inside the render's transaction, before COMMIT, so a head that commits
   always points at an object that exists. A render that rolls back leaves its uploads as
   orphans, which no head points at.
2. `delete_after_commit` removes pruned bodies once their rows are gone for good; a delete
   that fails is logged and left (an orphan costs storage, never correctness;
   fleet.artifact_orphans collects orphans daily).
3. Upload and delete of one key take the same Postgres advisory lock, and a delete skips a
   key a committed row uses again (`delete_unless_used`, the one delete), so a delete can
   never remove the object of a later render that brought the same bytes back.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, cast

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.db import transaction

from fleet import locks
from fleet.models import CacheArtifact

log = logging.getLogger(__name__)
STORAGE = "artifacts"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def failures() -> tuple[type[BaseException], ...]:
    """What a failing store raises. A function, so botocore is imported only by a process
    whose store failed (an `except` clause is evaluated only when something is raised):
    the web and the workers without a store never pay for it."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError, OSError)


class StoreError(Exception):
    """The object store refused or did not answer; str() says which store and what failed
    (never the access keys)."""


def configured() -> bool:
    """Whether new bodies go to the object store (CTXLAKE_S3_BUCKET is set)."""
    return STORAGE in settings.STORAGES


def key(fleet_id: int, name: str, sha256: str) -> str:
    return f"{settings.CTXLAKE_S3_PREFIX}{fleet_id}/{name}/{sha256}"


def parse_key(where: str) -> tuple[int, str, str] | None:
    """(fleet id, name, sha256) of a key `key` would have built, else None: a key is ours
    only if building it again from its parts gives it back, so `key` stays its one rule."""
    parts = where.removeprefix(settings.CTXLAKE_S3_PREFIX).split("/")
    if (not where.startswith(settings.CTXLAKE_S3_PREFIX) or len(parts) != 3
            or not parts[0].isascii() or not parts[0].isdigit()
            or not _SHA256.fullmatch(parts[2])):
        return None
    found = (int(parts[0]), parts[1], parts[2])
    return found if key(*found) == where else None


def upload(fleet_id: int, name: str, sha256: str, body: bytes) -> None:
    """Store `body` under its key; StoreError if the store fails. Inside the render's
    transaction: the key's lock is held until it commits (see the module's step 3)."""
    where = key(fleet_id, name, sha256)
    lock(where)
    try:
        saved = storage().save(where, ContentFile(body))
    except failures() as e:
        raise StoreError(f"object store {describe()}: upload of {where} failed: {e}") from e
    if saved != where:  # file_overwrite is on: the store must not rename a key
        raise StoreError(f"object store {describe()}: {where} was stored as {saved}")


def read(fleet_id: int, name: str, sha256: str) -> bytes:
    """The body under its key, checked against its hash (the ETag every host serves)."""
    where = key(fleet_id, name, sha256)
    if not configured():
        raise StoreError(f"{where} is in the object store, which is not configured: "
                         "set CTXLAKE_S3_* again, or render again to move it into Postgres")
    try:
        with storage().open(where, "rb") as f:
            body = f.read()
    except failures() as e:
        raise StoreError(f"object store {describe()}: reading {where} failed: {e}") from e
    if hashlib.sha256(body).hexdigest() != sha256:
        raise StoreError(f"object store {describe()}: {where} does not hold its content")
    return bytes(body)


def delete_after_commit(fleet_id: int, found: list[tuple[str, str]]) -> None:
    """Once the current transaction commits, delete the objects of these (name, sha256)
    bodies whose rows it deleted; nothing if it rolls back."""
    if not found:
        return
    if not configured():  # switched off: it cannot be reached, so it stays an orphan
        log.warning("object store not configured: %d pruned body(ies) of fleet %d left in it",
                    len(found), fleet_id)
        return
    transaction.on_commit(lambda: _delete(fleet_id, found), robust=True)


def _delete(fleet_id: int, found: list[tuple[str, str]]) -> None:
    for name, sha in found:
        try:
            delete_unless_used(fleet_id, name, sha)
        except failures() as e:
            log.warning("object store %s: %s left behind, its delete failed: %s",
                        describe(), key(fleet_id, name, sha), e)


def delete_unless_used(fleet_id: int, name: str, sha256: str) -> bool:
    """Delete the body's object unless a committed row in the store uses it; True if
    deleted. The one rule for every delete (pruning and orphan collection): under the
    key's lock, so it waits for a render uploading the same key to commit or roll back,
    then sees that render's row. Raises what a failing store raises (see `failures`)."""
    where = key(fleet_id, name, sha256)
    with transaction.atomic():
        lock(where)
        used = in_use(fleet_id, name, sha256)
        if not used:
            storage().delete(where)
    return not used


def in_use(fleet_id: int, name: str, sha256: str) -> bool:
    """Whether a committed row (that this transaction sees) has its body under this key."""
    return CacheArtifact.objects.filter(
        fleet_id=fleet_id, name=name, sha256=sha256, place=CacheArtifact.Place.OBJECT_STORE,
    ).exists()


def lock(where: str) -> None:
    """The key's advisory lock, held to the end of the current transaction."""
    locks.hold_for_transaction(f"ctxlake.object:{where}")


def storage() -> Storage:
    return storages[STORAGE]


def describe() -> str:
    """The store as a log line or an error may name it: endpoint and bucket, no keys."""
    options = cast(dict[str, Any], settings.STORAGES.get(STORAGE, {}).get("OPTIONS", {}))
    return f"{options.get('endpoint_url') or 'AWS S3'} bucket {options.get('bucket_name')}"
