"""Snapshot deltas: what changed in snapshot.sqlite between two renders, and applying it.

One module for both sides, so the row hash, the digest and the wire format have one
definition: the server seals each rendered snapshot (a version and a digest of its rows in
its `meta`) and diffs it against the previous render's row index; a syncing host applies
the delta to its live snapshot.sqlite in ONE SQLite transaction (claims, their FTS rows,
embeddings, timeline, meta), checks the digest before COMMIT and rolls back on any doubt,
so a reader sees the old snapshot or the new one. docs/cache-format.md, "Snapshot deltas".

Rows are keyed by rowid, which the renderer keeps stable (a claim's per-fleet number, a
claim event's id), so an unchanged claim is the same row in every render. The digest is a
sum of per-row hashes modulo 2**128: order-free, and updated by the rows a delta touches,
so checking it costs the size of the change, not of the snapshot. Stdlib only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import sqlite3
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

#: Tables diffed row by row (rowid-keyed). `meta` travels whole in every delta.
TABLES: Final = ("claims", "embeddings", "timeline")
DELTA_KIND: Final = "snapshot-delta"
META_VERSION: Final = "snapshot_version"
META_DIGEST: Final = "rows_digest"
#: Bounds a host enforces on a delta before writing anything.
MAX_ROWS: Final = 500_000  # per table and list
MAX_FIELD_CHARS: Final = 65_536
MAX_BLOB_BYTES: Final = 65_536
MAX_META: Final = 64
MAX_ROWID: Final = 2**62
_MOD: Final = 1 << 128

Index = dict[str, dict[int, int]]  # table → rowid → row hash


class Refused(Exception):
    """The delta cannot be applied to this snapshot; nothing was written. Download whole."""


# -- hashing ---------------------------------------------------------------------------------


def wire(value: Any) -> Any:
    """A column value as JSON carries it: bytes as {"$b": base64}, the rest as is."""
    if isinstance(value, bytes):
        return {"$b": base64.b64encode(value).decode()}
    return value


_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def row_hash(table: str, row: Iterable[Any]) -> int:
    """The hash of one row (rowid first), the same on the server and on a host.

    sha256 over the compact JSON of [table, *values] with each BLOB written as {"$n": its
    length}, then the BLOBs' bytes in column order (hashing raw bytes, not base64, is a
    third of a seal's time at 100k vectors); the first 16 bytes, big-endian.
    """
    values = list(row)
    blobs = [v for v in values if isinstance(v, bytes)]
    text = _ENCODER.encode(
        [table, *({"$n": len(v)} if isinstance(v, bytes) else v for v in values)]
    )
    h = hashlib.sha256(text.encode())
    for blob in blobs:
        h.update(blob)
    return int.from_bytes(h.digest()[:16], "big")


def digest_of(index: Index) -> str:
    return f"{sum(h for rows in index.values() for h in rows.values()) % _MOD:032x}"


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f"PRAGMA table_info({table})")]


def build_index(db: sqlite3.Connection) -> Index:
    return {
        t: {row[0]: row_hash(t, row) for row in db.execute(f"SELECT * FROM {t}")} for t in TABLES
    }


# -- the server: seal, diff, merge -----------------------------------------------------------


def seal(path: Path, *, version: int) -> Index:
    """Stamp a freshly rendered snapshot with its version and rows digest; its row index."""
    db = sqlite3.connect(path)
    try:
        index = build_index(db)
        db.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)",
            [(META_VERSION, str(version)), (META_DIGEST, digest_of(index))],
        )
        db.commit()
    finally:
        db.close()
    return index


def diff(old: Index, new: Index, path: Path, *, base: int, version: int) -> dict[str, Any]:
    """The delta from the render `old` indexes (version `base`) to the sealed file `path`."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {}
        for t in TABLES:
            before, after = old.get(t, {}), new[t]
            changed = sorted(r for r, h in after.items() if before.get(r) != h)
            tables[t] = {
                "columns": _columns(db, t),
                "upsert": [[wire(v) for v in row] for row in _rows(db, t, changed)],
                "delete": sorted(set(before) - set(after)),
            }
        meta = db.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
    finally:
        db.close()
    return {
        "kind": DELTA_KIND,
        "base": base,
        "version": version,
        "digest": digest_of(new),
        "meta": [list(m) for m in meta],
        "tables": tables,
    }


def _rows(db: sqlite3.Connection, table: str, rowids: list[int]) -> Iterator[tuple[Any, ...]]:
    for i in range(0, len(rowids), 500):
        chunk = rowids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        yield from db.execute(
            f"SELECT * FROM {table} WHERE rowid IN ({marks}) ORDER BY rowid", chunk
        )


def merge(chain: list[dict[str, Any]]) -> dict[str, Any]:
    """Consecutive deltas (each one's base the previous one's version) as one delta."""
    merged = chain[0]
    for step in chain[1:]:
        if step["base"] != merged["version"]:
            raise ValueError(f"deltas not consecutive: {merged['version']} → {step['base']}")
        tables = {}
        for t in TABLES:
            rows: dict[int, list[Any] | None] = {r[0]: r for r in merged["tables"][t]["upsert"]}
            rows.update(dict.fromkeys(merged["tables"][t]["delete"]))
            rows.update(dict.fromkeys(step["tables"][t]["delete"]))
            rows.update({r[0]: r for r in step["tables"][t]["upsert"]})
            tables[t] = {
                "columns": step["tables"][t]["columns"],
                "upsert": [r for _, r in sorted(rows.items()) if r is not None],
                "delete": sorted(k for k, r in rows.items() if r is None),
            }
        merged = {**step, "base": merged["base"], "tables": tables}
    return merged


def encode(delta: dict[str, Any]) -> bytes:
    return json.dumps(delta, separators=(",", ":"), ensure_ascii=False).encode()


def pack_index(index: Index) -> bytes:
    """The row index compactly (24 bytes a row): kept beside the latest render to diff from."""
    out = bytearray()
    for t in TABLES:
        rows = sorted(index.get(t, {}).items())
        out += struct.pack("<I", len(rows))
        out += struct.pack(f"<{len(rows)}q", *(r for r, _ in rows))
        out += b"".join(h.to_bytes(16, "big") for _, h in rows)
    return bytes(out)


def unpack_index(data: bytes) -> Index:
    index: Index = {}
    at = 0
    for t in TABLES:
        (n,) = struct.unpack_from("<I", data, at)
        rowids = struct.unpack_from(f"<{n}q", data, at + 4)
        at += 4 + 8 * n
        index[t] = {
            r: int.from_bytes(data[at + 16 * i : at + 16 * (i + 1)], "big")
            for i, r in enumerate(rowids)
        }
        at += 16 * n
    return index


# -- a host: check, then apply in one transaction --------------------------------------------


def decode(body: bytes) -> dict[str, Any]:
    """The delta JSON, shape-checked (values are checked by `apply` against the table)."""
    try:
        delta = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise Refused(f"not JSON ({type(e).__name__})") from None
    if not isinstance(delta, dict) or delta.get("kind") != DELTA_KIND:
        raise Refused("not a snapshot delta")
    for key in ("base", "version"):
        if not _is_int(delta.get(key)) or not 0 <= delta[key] < MAX_ROWID:
            raise Refused(f"bad {key}")
    if delta["version"] <= delta["base"]:
        raise Refused("version not after base")
    if not isinstance(delta.get("digest"), str) or len(delta["digest"]) != 32:
        raise Refused("bad digest")
    meta = delta.get("meta")
    if (
        not isinstance(meta, list)
        or not 0 < len(meta) <= MAX_META
        or not all(
            isinstance(m, list) and len(m) == 2 and all(_is_text(x) for x in m) for m in meta
        )
    ):
        raise Refused("bad meta")
    tables = delta.get("tables")
    if not isinstance(tables, dict) or set(tables) != set(TABLES):
        raise Refused("bad tables")
    for t in TABLES:
        part = tables[t]
        if not isinstance(part, dict) or not all(
            isinstance(part.get(k), list) and len(part[k]) <= MAX_ROWS
            for k in ("columns", "upsert", "delete")
        ):
            raise Refused(f"bad {t}")
        if not all(_is_rowid(r) for r in part["delete"]):
            raise Refused(f"bad rowid in {t}.delete")
    return delta


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_rowid(v: Any) -> bool:
    return _is_int(v) and 0 < v < MAX_ROWID


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_FIELD_CHARS and "\x00" not in v


def _value(v: Any) -> Any:
    """A wire value as SQLite stores it; Refused for anything a render never writes."""
    if v is None or _is_text(v) or (_is_int(v) and -(2**63) <= v < 2**63):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return v
    if (
        isinstance(v, dict)
        and set(v) == {"$b"}
        and isinstance(v["$b"], str)
        and len(v["$b"]) <= MAX_BLOB_BYTES * 4 // 3 + 4
    ):
        try:
            return base64.b64decode(v["$b"], validate=True)
        except (binascii.Error, ValueError):
            pass
    raise Refused(f"bad value {str(v)[:40]!r}")


def _checked_rows(part: dict[str, Any], columns: list[str], table: str) -> list[tuple[Any, ...]]:
    if part["columns"] != columns:
        raise Refused(f"{table}: columns differ from this snapshot's (a format change)")
    rows = []
    for row in part["upsert"]:
        if not isinstance(row, list) or len(row) != len(columns) or not _is_rowid(row[0]):
            raise Refused(f"bad row in {table}")
        rows.append(tuple(_value(v) for v in row))
    return rows


def apply(path: Path, delta: dict[str, Any], *, fleet: str) -> None:
    """Apply a decoded delta to the live snapshot at `path`, all or nothing.

    1. BEGIN IMMEDIATE: one writer; readers keep reading the committed state.
    2. Check the snapshot is the delta's base (version, fleet, format) and every value.
    3. Per changed row: take the old row's hash out of the digest and its text out of the
       FTS index, write the new row, put both back in; deleted rows likewise.
    4. The digest must be the delta's, else ROLLBACK and Refused; then meta, COMMIT.
    A reader in rollback-journal mode cannot see the file between 1 and COMMIT: the
    writer's pages stay in its own cache and journal until the commit's exclusive lock.
    """
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            _apply(db, delta, fleet)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        raise Refused(f"snapshot.sqlite: {e}") from None
    finally:
        db.close()


def _apply(db: sqlite3.Connection, delta: dict[str, Any], fleet: str) -> None:
    meta = dict(db.execute("SELECT key, value FROM meta"))
    new_meta = dict(delta["meta"])
    if meta.get(META_VERSION) != str(delta["base"]) or META_DIGEST not in meta:
        raise Refused(
            f"this snapshot is version {meta.get(META_VERSION)!r}, the delta's base "
            f"is {delta['base']}"
        )
    for key in ("fleet", "format_version"):
        if new_meta.get(key) != meta.get(key) or (key == "fleet" and meta.get(key) != fleet):
            raise Refused(f"{key} differs")
    if (
        new_meta.get(META_VERSION) != str(delta["version"])
        or new_meta.get(META_DIGEST) != delta["digest"]
    ):
        raise Refused("meta does not match the delta")
    checked = {t: _checked_rows(delta["tables"][t], _columns(db, t), t) for t in TABLES}
    total = int(meta[META_DIGEST], 16)
    for t in TABLES:
        for rowid in delta["tables"][t]["delete"]:
            total -= _remove(db, t, rowid)
        for row in checked[t]:
            total -= _remove(db, t, row[0])
            db.execute(f"INSERT INTO {t} VALUES ({','.join('?' * len(row))})", row)
            # hash what SQLite stored (column affinity may have converted a value)
            stored = db.execute(f"SELECT * FROM {t} WHERE rowid = ?", (row[0],)).fetchone()
            total += row_hash(t, stored)
            if t == "claims":
                db.execute(
                    "INSERT INTO claims_fts (rowid, text, subject) "
                    "SELECT rowid, text, subject FROM claims WHERE rowid = ?",
                    (row[0],),
                )
    if f"{total % _MOD:032x}" != delta["digest"]:
        raise Refused("the rows after applying do not match the server's digest")
    db.execute("DELETE FROM meta")
    db.executemany("INSERT INTO meta VALUES (?, ?)", list(new_meta.items()))


def _remove(db: sqlite3.Connection, table: str, rowid: int) -> int:
    """Delete a row (and its FTS entry); the hash it contributed, 0 when there was none."""
    old = db.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
    if old is None:
        return 0
    if table == "claims":
        db.execute(
            "INSERT INTO claims_fts (claims_fts, rowid, text, subject) "
            "SELECT 'delete', rowid, text, subject FROM claims WHERE rowid = ?",
            (rowid,),
        )
    db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
    return row_hash(table, old)


def meta_of(path: Path) -> dict[str, str]:
    """A snapshot's meta table."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT key, value FROM meta"))
    finally:
        db.close()


def version_of(path: Path) -> int | None:
    """The local snapshot's sealed version, or None (unsealed, unreadable, absent)."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        meta = dict(
            db.execute(
                "SELECT key, value FROM meta WHERE key IN (?, ?)", (META_VERSION, META_DIGEST)
            )
        )
    except sqlite3.Error:
        return None
    finally:
        db.close()
    raw = meta.get(META_VERSION)
    return int(raw) if raw and raw.isdigit() and META_DIGEST in meta else None
