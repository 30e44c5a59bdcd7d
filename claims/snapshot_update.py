"""A render of snapshot.sqlite proportional to the change (issue 25, item 5).

A render reads only the claims that changed since the previous render (the change cursor,
claims.snapshot_changes), computes their rows with the same writers a full render uses
(claims.snapshot_render), and publishes them as a delta (mcp_bridge.contract.delta):
applied, with the function every agent host uses, to a copy of the previous snapshot —
copy-on-write, so a reader of the live file sees the old snapshot or the new one — and
stored as the delta hosts download. Applying checks the rows digest the server computed,
so the result has the same rows as a full render, or the render falls back to one.

A lease, handoff or roster change changes no claim: the snapshot is left as it is (no
new version, no bytes read or written), and only the small files are rendered again.

A full rebuild happens on the first render, when the previous snapshot's format or
embedder differs, after FULL_REBUILD_AFTER deltas in a row, when most claims changed,
when a rename touched the timeline's names, or when a delta does not apply.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from claims import snapshot_changes, snapshot_render
from claims.models import Claim, Contradiction, SnapshotChange
from fleet import artifacts
from fleet.models import Fleet, SnapshotDelta
from mcp_bridge import contract
from mcp_bridge.contract import delta

log = logging.getLogger(__name__)

#: Deltas applied in a row before a render rebuilds from every claim anyway: bounds what
#: an unnoticed divergence could cost to a few minutes of renders under load.
FULL_REBUILD_AFTER = 200
#: A change to more than this share of the claims is rebuilt whole (a re-embedding): the
#: rebuild reads them all anyway, and hosts download the file instead of a huge delta.
FULL_SHARE = artifacts.DELTA_MAX_SHARE
#: meta keys that must be the same in the previous snapshot for a delta to apply to it.
_SAME_META = ("format_version", "fleet", "embedder_name", "embedder_dims")

How = Literal["full", "delta", "unchanged"]


@dataclass(frozen=True)
class Rendered:
    """What a snapshot render did: `path` holds the new file (None when unchanged)."""

    how: How
    claims: int
    path: Path | None
    changed: int = 0  # claims re-read (a delta render)


def render_snapshot(fleet: Fleet, tmp: Path, *, now: datetime, local: Path | None = None,
                    ) -> Rendered:
    """Render the fleet's snapshot into `tmp`, reading only what changed when it can.

    Call inside the render's transaction, which holds the fleet's render lock: the cursor
    is taken before anything is read, and stored with the snapshot this publishes.
    `local` is this host's copy of the latest snapshot, if it keeps one: a delta starts
    from it when it is that version, instead of reading the stored render back.
    """
    seen = snapshot_changes.cursor()
    prev = SnapshotDelta.objects.filter(fleet=fleet).order_by("-version").first()
    if prev is not None and prev.cursor and prev.index and prev.chain < FULL_REBUILD_AFTER:
        try:
            done = _update(fleet, prev, tmp, now=now, seen=seen, local=local)
        except (delta.Refused, sqlite3.Error) as e:
            log.warning("fleet %s: snapshot delta refused (%s); rebuilding it whole",
                        fleet.slug, e)
            done = None
        if done is not None:
            return done
    count = snapshot_render.write_snapshot(fleet, tmp, generated_at=now)
    artifacts.record_snapshot(fleet, tmp, cursor=seen)
    snapshot_changes.prune(fleet, seen)
    return Rendered("full", count, tmp)


def forget(fleet: Fleet) -> None:
    """Memory is off: no snapshot is rendered, so nothing reads the fleet's change rows.
    Drop them, and the cursor with them: the next snapshot (memory back on) is rebuilt
    whole, so no change made while it was off can be missed."""
    SnapshotDelta.objects.filter(fleet=fleet).exclude(cursor="").update(cursor="")
    SnapshotChange.objects.filter(fleet_id=fleet.pk).delete()


def _update(fleet: Fleet, prev: SnapshotDelta, tmp: Path, *, now: datetime, seen: str,
            local: Path | None) -> Rendered | None:
    """The render as a delta on `prev`, or None when only a full rebuild will do."""
    changes = snapshot_changes.since(fleet, prev.cursor)
    old = delta.unpack_index(bytes(prev.index))
    known = len(old["claims"])
    if changes.full or len(changes.claims | changes.numbers) > max(known * FULL_SHARE, 50):
        return None
    # a contradiction mark depends on both claims being live now: recompute them always
    marked = _in_contradictions(fleet)
    changed = changes.numbers | _numbers(changes.claims)  # their timeline rows too
    numbers = changed | _numbers(marked)
    scratch = sqlite3.connect(":memory:")
    try:
        snapshot_render.create_tables(scratch)
        snapshot_render.write_claims(scratch, fleet, only=changes.claims | marked)
        snapshot_render.write_timeline(scratch, fleet, only=changes.claims)
        fresh = {t: {r[0]: r for r in scratch.execute(f"SELECT * FROM {t}")} for t in delta.TABLES}
        columns = {t: [c[1] for c in scratch.execute(f"PRAGMA table_info({t})")]
                   for t in delta.TABLES}
    finally:
        scratch.close()
    meta_prev = _prev_meta(prev, fleet)
    if meta_prev is None:
        return None
    untouched = not changes.claims and not changes.numbers and all(
        old[t].get(r) == delta.row_hash(t, row) for t in ("claims", "embeddings")
        for r, row in fresh[t].items()
    ) and set(fresh["claims"]) == (numbers & set(old["claims"]))
    if untouched and meta_prev.get("memory_mode") == fleet.memory_mode:
        SnapshotDelta.objects.filter(pk=prev.pk).update(cursor=seen)  # same rows at `seen`
        snapshot_changes.prune(fleet, seen)
        return Rendered("unchanged", known, None)
    touched = {"claims": numbers, "embeddings": numbers, "timeline": changed}
    if not _copy_local(local, prev, tmp):
        stored = artifacts.latest(fleet, contract.SNAPSHOT)
        if stored is None:
            return None
        tmp.write_bytes(stored[1])
    return _publish_delta(fleet, prev, tmp, old, fresh, columns, touched,
                          len(changes.claims), now=now, seen=seen)


def _publish_delta(fleet: Fleet, prev: SnapshotDelta, tmp: Path, old: delta.Index,
                   fresh: dict[str, dict[int, tuple[Any, ...]]],
                   columns: dict[str, list[str]], touched: dict[str, set[int]], changed: int,
                   *, now: datetime, seen: str) -> Rendered:
    """Build the delta from `prev`, apply it to the copy of the previous snapshot in `tmp`,
    and record it.

    `touched` names, per table, the rowids whose rows were recomputed (claims by number;
    the timeline by the numbers of the claims whose events were re-read): each is either
    in `fresh` or gone.
    """
    touched = {**touched,
               "timeline": _timeline_rows(tmp, touched["timeline"]) | set(fresh["timeline"])}
    index: delta.Index = {}
    tables: dict[str, Any] = {}
    for t in delta.TABLES:
        rows = dict(old[t])
        for rowid in touched[t]:
            rows.pop(rowid, None)
        rows.update({r: delta.row_hash(t, row) for r, row in fresh[t].items()})
        index[t] = rows
        tables[t] = {
            "columns": columns[t],
            "upsert": [[delta.wire(v) for v in row] for r, row in sorted(fresh[t].items())
                       if old[t].get(r) != rows[r]],
            "delete": sorted(r for r in touched[t] if r in old[t] and r not in rows),
        }
    version = prev.version + 1
    digest = delta.digest_of(index)
    meta = dict(snapshot_render.meta(fleet, now, len(index["claims"])))
    meta.update({delta.META_VERSION: str(version), delta.META_DIGEST: digest})
    step = {"kind": delta.DELTA_KIND, "base": prev.version, "version": version,
            "digest": digest, "meta": [list(m) for m in sorted(meta.items())], "tables": tables}
    delta.apply(tmp, step, fleet=fleet.slug)  # checks the digest; Refused → a full rebuild
    artifacts.record_delta(fleet, prev, step, index, cursor=seen)
    snapshot_changes.prune(fleet, seen)
    return Rendered("delta", len(index["claims"]), tmp, changed=changed)


def _copy_local(local: Path | None, prev: SnapshotDelta, tmp: Path) -> bool:
    """Copy this host's snapshot to `tmp` if it is `prev`'s render (its version and rows
    digest); False when it is not (another worker host rendered since, or none here)."""
    if local is None or delta.version_of(local) != prev.version:
        return False
    try:
        shutil.copyfile(local, tmp)  # a render replacing it meanwhile: we keep the old inode
    except OSError:
        return False
    meta = delta.meta_of(tmp)
    return meta.get(delta.META_VERSION) == str(prev.version) and \
        meta.get(delta.META_DIGEST) == prev.digest


def _prev_meta(prev: SnapshotDelta, fleet: Fleet) -> dict[str, str] | None:
    """The previous snapshot's meta as this render would write it, or None when a delta
    cannot continue from it (another format or embedder: rebuild whole)."""
    mine = dict(snapshot_render.meta(fleet, prev.created_at, 0))
    theirs: dict[str, str] = prev.meta
    if any(theirs.get(k) != mine[k] for k in _SAME_META):
        return None
    return theirs


def _numbers(claim_pks: set[int]) -> set[int]:
    return set(Claim.objects.filter(pk__in=claim_pks).values_list("number", flat=True))


def _in_contradictions(fleet: Fleet) -> set[int]:
    """Claims in an unresolved contradiction: whether it is marked depends on the time."""
    pairs = Contradiction.objects.filter(claim__fleet=fleet, resolved_at__isnull=True)
    return {pk for pair in pairs.values_list("claim_id", "other_id") for pk in pair}


def _timeline_rows(path: Path, numbers: set[int]) -> set[int]:
    """Rowids of the previous snapshot's timeline rows of these claims."""
    ids = [Claim(number=n).public_id for n in numbers]
    db = sqlite3.connect(path)
    try:
        found: set[int] = set()
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            found.update(r for (r,) in db.execute(
                f"SELECT rowid FROM timeline WHERE claim_id IN ({','.join('?' * len(chunk))})",
                chunk))
        return found
    finally:
        db.close()
