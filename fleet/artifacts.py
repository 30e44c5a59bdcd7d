"""Rendered cache files in Postgres: what every web host serves, whichever worker rendered.

A render (ctxlake_site.workers) hands its files' bytes to `publish`, inside the render's
transaction: each body is stored once per content (sha256, which is also its ETag) and
the fleet's heads — the latest render of each file name — move together when that
transaction commits. `latest` and `listing` are what `GET cache/*` reads.

Bodies are in the row, or in the object store when one is configured (fleet.artifact_store):
the row (hash, size, where the body is) stays here either way, so heads still move at
COMMIT. A row is served from where its body was written; the setting decides only where
new bodies go, and a render of the same bytes with the store unset moves the body back
into Postgres.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F

from fleet import artifact_store, binary_sql, body_memo
from fleet.models import CacheArtifact, CacheHead, Fleet, SnapshotDelta
from mcp_bridge import contract
from mcp_bridge.contract import delta

#: Renders kept per fleet and file name, the latest included; older ones are deleted by
#: the render that makes them older. A few, so a slow reader's previous file outlives the
#: next render or two; the latest is all that is served.
RENDERS_KEPT = 3
#: Snapshot deltas kept per fleet: a host more renders behind than this downloads the whole
#: snapshot. At one render every few seconds under load, ~50 cover a few minutes offline;
#: each is the size of its change, so keeping them is cheap.
DELTAS_KEPT = 50
#: A delta larger than this share of the whole snapshot is not served: the host downloads
#: the snapshot instead (fewer bytes, and one rename instead of a long transaction).
DELTA_MAX_SHARE = 0.5


@dataclass(frozen=True)
class Listed:
    """One file of a fleet's latest render, without its body."""

    name: str
    size: int
    etag: str
    rendered_at: datetime


@transaction.atomic
def publish(fleet: Fleet, files: Mapping[str, bytes], *, at: datetime,
            keep: Collection[str] = ()) -> None:
    """Make `files` (name → bytes) the fleet's latest render; drop names not in it, except
    those in `keep` (rendered before and unchanged: their head stays as it is).

    Call inside the render's transaction (which holds the fleet's render lock): the heads
    move at its COMMIT, all at once, so a web host serves the old set or the new one. With
    the object store configured, new bodies are uploaded before that COMMIT; a store that
    fails raises artifact_store.StoreError and nothing of this render is published.
    """
    heads = [CacheHead(fleet=fleet, name=name, artifact=_stored(fleet, name, body, at=at),
                       rendered_at=at) for name, body in files.items()]
    # every head in one INSERT … ON CONFLICT DO UPDATE: a render moves five or six of them
    CacheHead.objects.bulk_create(heads, update_conflicts=True, unique_fields=["fleet", "name"],
                                  update_fields=["artifact", "rendered_at"])
    CacheHead.objects.filter(fleet=fleet).exclude(name__in=[*files, *keep]).delete()
    prune(fleet)


# Bodies are written and read with binary parameters and results (fleet.binary_sql), not
# through the ORM: a snapshot of 10k claims is 27 MB, which Django's text protocol sends
# and reads as hex.
_TABLE, _HEADS = CacheArtifact._meta.db_table, CacheHead._meta.db_table
_INSERT = (f"INSERT INTO {_TABLE} (fleet_id, name, sha256, size, body, place, created_at) "
           "VALUES (%s, %s, %s, %s, %b, %s, %s) "
           "ON CONFLICT (fleet_id, name, sha256) DO NOTHING RETURNING id")
_MOVE_BACK = f"UPDATE {_TABLE} SET body = %b, place = %s WHERE id = %s"
_LATEST = (f"SELECT h.name, a.sha256, a.body, a.place FROM {_HEADS} h JOIN {_TABLE} a "
           "ON a.id = h.artifact_id WHERE h.fleet_id = %s AND h.name = ANY(%s)")


def _stored(fleet: Fleet, name: str, body: bytes, *, at: datetime) -> CacheArtifact:
    """The row of these bytes, created (and the body uploaded) if new."""
    sha = hashlib.sha256(body).hexdigest()
    to_store = artifact_store.configured()
    place = CacheArtifact.Place.OBJECT_STORE if to_store else CacheArtifact.Place.DATABASE
    inserted = binary_sql.execute(
        _INSERT, [fleet.pk, name, sha, len(body), b"" if to_store else body, place, at],
        fetch=True)
    if inserted:
        if to_store:
            artifact_store.upload(fleet.pk, name, sha, body)
        return CacheArtifact(pk=inserted[0][0], fleet=fleet, name=name, sha256=sha,
                             size=len(body), place=place, created_at=at)
    artifact = CacheArtifact.objects.defer("body").get(fleet=fleet, name=name, sha256=sha)
    # the same bytes again: make it the newest, so pruning keeps it
    CacheArtifact.objects.filter(pk=artifact.pk).update(created_at=at)
    if artifact.place == CacheArtifact.Place.OBJECT_STORE and not to_store:
        # the store was switched off: the body moves back into Postgres
        binary_sql.execute(_MOVE_BACK, [body, CacheArtifact.Place.DATABASE, artifact.pk])
    return artifact


def prune(fleet: Fleet) -> int:
    """Delete the fleet's artifacts past the newest RENDERS_KEPT per name, the head counted
    and never deleted, and every old one of a name no longer rendered; how many went.
    Bodies in the object store are deleted after COMMIT (artifact_store)."""
    heads = dict(CacheHead.objects.filter(fleet=fleet).values_list("name", "artifact_id"))
    older: dict[str, int] = {}
    stale: list[int] = []
    stored: list[tuple[str, str]] = []
    for pk, name, sha, place in (
        CacheArtifact.objects.filter(fleet=fleet)
        .order_by("name", F("created_at").desc(), "-id")
        .values_list("pk", "name", "sha256", "place")
    ):
        if pk == heads.get(name):
            continue
        older[name] = older.get(name, 0) + 1
        if name not in heads or older[name] >= RENDERS_KEPT:
            stale.append(pk)
            if place == CacheArtifact.Place.OBJECT_STORE:
                stored.append((name, sha))
    if not stale:
        return 0
    gone = CacheArtifact.objects.filter(pk__in=stale).delete()[0]
    artifact_store.delete_after_commit(fleet.pk, stored)
    return gone


def stranded(fleet: Fleet) -> list[str]:
    """Names whose latest render is in the object store while none is configured (it was
    switched off): they cannot be served until rendered again."""
    if artifact_store.configured():
        return []
    return list(
        CacheHead.objects.filter(fleet=fleet, artifact__place=CacheArtifact.Place.OBJECT_STORE)
        .order_by("name").values_list("name", flat=True)
    )


def listing(fleet: Fleet) -> list[Listed]:
    """The fleet's latest render, file by file (no bodies read)."""
    rows = (
        CacheHead.objects.filter(fleet=fleet)
        .order_by("name")
        .values_list("name", "artifact__size", "artifact__sha256", "rendered_at")
    )
    return [Listed(name, size, contract.etag_of(sha), at) for name, size, sha, at in rows]


def etag(fleet: Fleet, name: str) -> str | None:
    """The ETag of the latest render of `name`, or None (never rendered, or not any more)."""
    sha = (
        CacheHead.objects.filter(fleet=fleet, name=name)
        .values_list("artifact__sha256", flat=True)
        .first()
    )
    return None if sha is None else contract.etag_of(sha)


def latest(fleet: Fleet, name: str, *, listed: str | None = None) -> tuple[str, bytes] | None:
    """(ETag, body) of the latest render of `name`, or None: one query, and one read of
    the object store when the body is there (artifact_store.StoreError if that fails).
    `listed`: the ETag a listing has just given as the latest; if this process has read
    that body before (fleet.body_memo), it is the answer, with no query."""
    if listed is not None and (kept := body_memo.get(fleet.pk, listed)) is not None:
        return listed, kept
    return latest_of(fleet, [name]).get(name)


def latest_of(fleet: Fleet, names: Collection[str], *,
              unreadable: Callable[[str, Exception], None] | None = None,
              ) -> dict[str, tuple[str, bytes]]:
    """(ETag, body) of the latest render of each of `names` that has one, in one query.
    A body the object store fails to give raises artifact_store.StoreError, or, with
    `unreadable`, is reported to it (name, error) and left out."""
    found = {}
    for name, sha, body, place in binary_sql.execute(_LATEST, [fleet.pk, list(names)],
                                                     fetch=True):
        if place == CacheArtifact.Place.OBJECT_STORE:
            try:
                body = artifact_store.read(fleet.pk, name, sha)
            except artifact_store.StoreError as e:
                if unreadable is None:
                    raise
                unreadable(name, e)
                continue
        found[name] = (contract.etag_of(sha), bytes(body))
        body_memo.put(fleet.pk, *found[name])
    return found


def bodies(fleet: Fleet, wanted: Mapping[str, str], *,
           unreadable: Callable[[str, Exception], None] | None = None) -> dict[str, bytes]:
    """name → body for each file of `wanted` (name → the ETag a listing gave): kept from an
    earlier read in this process (fleet.body_memo: an ETag names its bytes), else the
    latest render's, if it still has that ETag (one query for all the others). A file that
    moved on since the listing is left out, as is one the store cannot give (`unreadable`
    as for latest_of)."""
    found = {}
    for name, etag in wanted.items():
        if (kept := body_memo.get(fleet.pk, etag)) is not None:
            found[name] = kept
    rest = [name for name in wanted if name not in found]
    if rest:
        for name, (etag, body) in latest_of(fleet, rest, unreadable=unreadable).items():
            if etag == wanted[name]:
                found[name] = body
    return found


def record_snapshot(fleet: Fleet, path: Path, *, cursor: str = "") -> int:
    """Seal the freshly rendered snapshot at `path` with the fleet's next version, and store
    the delta from the previous render; its version.

    Call inside the render's transaction (its lock orders renders, so versions never race):
    the delta row commits with the snapshot's new head, or neither does. `cursor` is the
    change cursor the snapshot was read at (claims.snapshot_changes).
    """
    prev = SnapshotDelta.objects.filter(fleet=fleet).order_by("-version").first()
    version = prev.version + 1 if prev else 1
    index = delta.seal(path, version=version)
    body = b""
    if prev is not None and prev.index:
        old = delta.unpack_index(bytes(prev.index))
        body = delta.encode(delta.diff(old, index, path, base=prev.version, version=version))
    _record(fleet, prev, version=version, body=body, index=index, cursor=cursor, chain=0,
            meta=delta.meta_of(path))
    return version


def record_delta(fleet: Fleet, prev: SnapshotDelta, step: dict[str, Any], index: delta.Index,
                 *, cursor: str) -> int:
    """Record a render made by applying `step` (a delta from `prev`) to `prev`'s snapshot:
    the same row as record_snapshot makes, one more in the chain since the last rebuild."""
    _record(fleet, prev, version=step["version"], body=delta.encode(step), index=index,
            cursor=cursor, chain=prev.chain + 1, meta=dict(step["meta"]))
    return int(step["version"])


def _record(fleet: Fleet, prev: SnapshotDelta | None, *, version: int, body: bytes,
            index: delta.Index, cursor: str, chain: int, meta: dict[str, str]) -> None:
    SnapshotDelta.objects.create(
        fleet=fleet,
        version=version,
        base=prev.version if prev else None,
        body=body,
        digest=delta.digest_of(index),
        index=delta.pack_index(index),
        cursor=cursor,
        chain=chain,
        meta=meta,
    )
    if prev is not None:
        SnapshotDelta.objects.filter(pk=prev.pk).update(index=b"")  # the newest diffs on
    keep = version - DELTAS_KEPT
    SnapshotDelta.objects.filter(fleet=fleet, version__lte=keep).delete()


def snapshot_version(fleet: Fleet) -> int | None:
    """The version of the fleet's latest snapshot render, or None."""
    return (
        SnapshotDelta.objects.filter(fleet=fleet).order_by("-version")
        .values_list("version", flat=True).first()
    )


def snapshot_delta(fleet: Fleet, since: int) -> bytes | None:
    """One delta from version `since` to the latest render, or None when the chain is not
    all kept (pruned, or a render without a delta): the host then downloads in full.
    b"" when `since` is already the latest."""
    chain = list(
        SnapshotDelta.objects.filter(fleet=fleet, version__gt=since)
        .order_by("version")
        .values_list("base", "version", "body")
    )
    if not chain:
        latest = SnapshotDelta.objects.filter(fleet=fleet, version=since).exists()
        return b"" if latest else None
    expected = since
    for base, version, body in chain:  # each must start where the one before ended
        if base != expected or not body:
            return None
        expected = version
    body = (
        bytes(chain[0][2])
        if len(chain) == 1
        else delta.encode(delta.merge([json.loads(bytes(body)) for _, _, body in chain]))
    )
    full = (
        CacheHead.objects.filter(fleet=fleet, name=contract.SNAPSHOT)
        .values_list("artifact__size", flat=True)
        .first()
    )
    # a change to most claims (a re-embedding) is cheaper to download whole than to apply
    return None if full is None or len(body) > full * DELTA_MAX_SHARE else body
