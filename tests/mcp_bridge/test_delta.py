"""Snapshot deltas (mcp_bridge.contract.delta) on real snapshot files, without a server.

The reference writer renders a snapshot; a "next render" is the same file changed the way
the server's render changes it (rows updated, retired, added under stable rowids, the FTS
index rebuilt). The delta between them, applied to a copy of the first, must answer
every search exactly as the second does, and a delta that is wrong in any way must leave
the snapshot exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_bridge import contract, sync
from mcp_bridge.cache import Cache
from mcp_bridge.contract import delta, embed
from mcp_bridge.snapshot import Snapshot
from mcp_bridge.testing import snapshot_rows, synthetic_claims, write_snapshot
from tests.mcp_bridge.stdio import ROOT

FLEET = "acme"
QUERIES = (
    "retry cache invalidation",
    "database migration",
    "deploy rollback timeout",
    "flaky test",
    "widgets",
)


def _vector(seed: int) -> bytes:
    v = np.random.default_rng(seed).standard_normal(embed.DIMS).astype("<f4")
    return (v / np.linalg.norm(v)).astype("<f4").tobytes()


def _next_render(path: Path, out: Path) -> None:
    """`path` changed as a render would change it: 3 claims edited (one with a new
    vector), 2 retired, 3 added, a timeline row added and one changed, meta moved on."""
    shutil.copy(path, out)
    db = sqlite3.connect(out)
    db.execute(
        "UPDATE claims SET text = text || ' widgets now', confidence = 0.33 "
        "WHERE rowid IN (2, 5, 8)"
    )
    db.execute("UPDATE embeddings SET vector = ? WHERE rowid = 5", (_vector(5),))
    db.execute("DELETE FROM embeddings WHERE rowid IN (3, 9)")
    db.execute("DELETE FROM claims WHERE rowid IN (3, 9)")
    top = db.execute("SELECT max(rowid) FROM claims").fetchone()[0]
    for n in range(top + 1, top + 4):
        db.execute(
            "INSERT INTO claims (rowid, id, text, type, subject, scope, status, "
            "confidence, independent_sessions, created_at, promoted_at) VALUES "
            "(?, ?, ?, 'fact', 'widgets', 'fleet', 'promoted', 0.9, 2, "
            "'2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z')",
            (n, f"cc-{n}", f"new widgets claim {n} about database migration"),
        )
        db.execute("INSERT INTO embeddings VALUES (?, ?)", (n, _vector(n)))
    db.execute(
        "INSERT INTO timeline (subject, at, kind, summary) VALUES "
        "('widgets', '2026-01-03T00:00:00Z', 'promoted', 'new')"
    )
    db.execute("UPDATE timeline SET outcome = 'success' WHERE rowid = 1")
    db.execute("UPDATE meta SET value = '2026-01-03T00:00:00Z' WHERE key = 'generated_at'")
    db.execute(contract.SNAPSHOT_FTS_REBUILD)
    db.commit()
    db.close()


@pytest.fixture
def renders(tmp_path: Path) -> dict[str, Any]:
    """v1 (sealed, with its index) and v2 (sealed), the delta v1 → v2, and a host's copy."""
    claims = synthetic_claims(60, seed=3)
    timeline = [
        {
            "subject": c["subject"],
            "at": "2026-01-01T00:00:00Z",
            "kind": "promoted",
            "claim_id": c["id"],
            "summary": c["text"],
        }
        for c in claims[:20]
    ]
    v1, v2 = tmp_path / "v1.sqlite", tmp_path / "v2.sqlite"
    write_snapshot(v1, FLEET, claims, vectors="random", timeline=timeline)
    index1 = delta.seal(v1, version=1)
    _next_render(v1, v2)
    index2 = delta.seal(v2, version=2)
    host = tmp_path / "host" / contract.SNAPSHOT
    host.parent.mkdir()
    shutil.copy(v1, host)
    return {
        "v1": v1,
        "v2": v2,
        "host": host,
        "index1": index1,
        "index2": index2,
        "delta": delta.diff(index1, index2, v2, base=1, version=2),
    }


def _answers(path: Path) -> list[Any]:
    snap = Snapshot(path, fleet=FLEET)
    try:
        query_vector = np.frombuffer(_vector(5), dtype="<f4")
        return [snap.search(q, k=10, query_vector=query_vector).results for q in QUERIES] + [
            snap.timeline("widgets", since=None, limit=50)[0],
            snap.for_paths(["src/**"]),
        ]
    finally:
        snap.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_it_applies_a_delta_and_searches_exactly_like_the_full_snapshot(
    renders: dict[str, Any],
) -> None:
    d = renders["delta"]
    assert len(d["tables"]["claims"]["upsert"]) == 6 and d["tables"]["claims"]["delete"] == [3, 9]
    wire = delta.encode(d)
    assert len(wire) < renders["v2"].stat().st_size / 4
    delta.apply(renders["host"], delta.decode(wire), fleet=FLEET)
    assert snapshot_rows(renders["host"]) == snapshot_rows(renders["v2"])
    assert _answers(renders["host"]) == _answers(renders["v2"])
    db = sqlite3.connect(renders["host"])  # the FTS index is whole, not just answering
    assert (
        db.execute(
            "INSERT INTO claims_fts(claims_fts, rank) VALUES ('integrity-check', 1)"
        ).fetchall()
        == []
    )
    db.close()
    assert delta.version_of(renders["host"]) == 2


def test_merged_deltas_equal_one_delta(renders: dict[str, Any], tmp_path: Path) -> None:
    v3 = tmp_path / "v3.sqlite"
    _next_render(renders["v2"], v3)
    index3 = delta.seal(v3, version=3)
    second = delta.diff(renders["index2"], index3, v3, base=2, version=3)
    merged = delta.merge([renders["delta"], second])
    assert merged["base"] == 1 and merged["version"] == 3
    delta.apply(renders["host"], merged, fleet=FLEET)
    assert snapshot_rows(renders["host"]) == snapshot_rows(v3)
    assert delta.unpack_index(delta.pack_index(index3)) == index3


def _tampered(d: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    d = json.loads(json.dumps(d))
    target = d
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(last) if isinstance(target, list) else last] = value
    return d


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("tables.claims.upsert.0.2", "quietly changed text"),  # digest mismatch
        ("tables.claims.upsert.0.2", "nul\x00byte"),
        ("tables.claims.upsert.0.2", "x" * (delta.MAX_FIELD_CHARS + 1)),
        ("tables.claims.upsert.0.2", ["a", "list"]),
        ("tables.claims.upsert.0.7", True),
        ("tables.claims.upsert.0.7", float("nan")),
        ("tables.claims.upsert.0.0", -4),
        ("tables.claims.upsert.0", [1, 2]),
        ("tables.embeddings.upsert.0.1", {"$b": "not base64!"}),
        ("tables.claims.columns", ["rowid", "id", "text; DROP TABLE claims"]),
        ("tables.claims.delete", ["3"]),
        ("base", 7),
        ("version", 1),
        ("digest", "0" * 32),
        ("meta", [["fleet", "other"]]),
        ("kind", "something-else"),
    ],
)
def test_a_bad_delta_is_refused_and_nothing_is_written(
    renders: dict[str, Any], path: str, value: Any
) -> None:
    before = _sha(renders["host"])
    with pytest.raises(delta.Refused):
        wire = json.dumps(_tampered(renders["delta"], path, value)).encode()
        delta.apply(renders["host"], delta.decode(wire), fleet=FLEET)
    assert _sha(renders["host"]) == before
    assert not renders["host"].with_name(contract.SNAPSHOT + "-journal").exists()


def test_another_fleet_or_garbage_is_refused(renders: dict[str, Any]) -> None:
    with pytest.raises(delta.Refused):
        delta.apply(renders["host"], renders["delta"], fleet="other")
    for junk in (b"", b"[]", b"\xff\xfe", b"{" * 100_000, b'{"kind": "snapshot-delta"}'):
        with pytest.raises(delta.Refused):
            delta.decode(junk)


def test_an_open_reader_follows_the_delta_without_a_stale_matrix(renders: dict[str, Any]) -> None:
    snap = Snapshot(renders["host"], fleet=FLEET)
    query_vector = np.frombuffer(_vector(5), dtype="<f4")
    old = snap.search("widgets", k=10, query_vector=query_vector).results  # matrix loaded
    delta.apply(renders["host"], renders["delta"], fleet=FLEET)
    new = snap.search("widgets", k=10, query_vector=query_vector).results
    fresh = Snapshot(renders["v2"], fleet=FLEET)
    assert new == fresh.search("widgets", k=10, query_vector=query_vector).results != old
    snap.close()
    fresh.close()


def test_a_reader_sees_the_old_snapshot_or_the_new_one_never_a_mix(renders: dict[str, Any]) -> None:
    """Searches run back to back while the delta commits: each answer is v1's or v2's
    (a search is one read transaction; the vector matrix is rebuilt after the commit)."""
    old, new = _answers(renders["v1"]), _answers(renders["v2"])
    snap = Snapshot(renders["host"], fleet=FLEET)
    seen: list[tuple[int, Any]] = []
    applied = threading.Event()

    def read() -> None:
        query_vector = np.frombuffer(_vector(5), dtype="<f4")
        while len(seen) < 2000:
            i = len(seen) % len(QUERIES)
            answer = snap.search(QUERIES[i], k=10, query_vector=query_vector).results
            seen.append((i, answer))
            if applied.is_set() and i == len(QUERIES) - 1 and answer == new[i]:
                return

    reader = threading.Thread(target=read)
    reader.start()
    while not seen:  # at least one search before the delta
        threading.Event().wait(0.001)
    delta.apply(renders["host"], renders["delta"], fleet=FLEET)
    applied.set()
    reader.join(timeout=60)
    snap.close()
    assert seen[0][1] == old[0] and seen[-1][1] == new[len(QUERIES) - 1]
    assert all(answer in (old[i], new[i]) for i, answer in seen)
    assert all(old[i] != new[i] for i in range(len(QUERIES)))  # the test can tell them apart


def test_a_delta_killed_before_commit_is_rolled_back_by_the_next_sync(
    renders: dict[str, Any],
) -> None:
    """The writer dies mid-transaction (pages spilled to the file): the bridge cannot read
    the snapshot meanwhile (a note, never half a delta), and sync's next pass rolls the
    journal back to the old snapshot, whole."""
    before = snapshot_rows(renders["host"])
    code = (
        "import os, sys, json, sqlite3\n"
        "from pathlib import Path\n"
        "from mcp_bridge.contract import delta\n"
        "real = delta._apply\n"
        "def dying(db, d, fleet):\n"
        "    db.execute('PRAGMA cache_size = 1')\n"
        "    real(db, d, fleet)\n"
        "    os._exit(9)\n"
        "delta._apply = dying\n"
        "d = json.loads(Path(sys.argv[2]).read_text())\n"
        "delta.apply(Path(sys.argv[1]), d, fleet=sys.argv[3])\n"
    )
    wire = renders["host"].with_name("delta.json")
    wire.write_bytes(delta.encode(renders["delta"]))
    done = subprocess.run(
        [sys.executable, "-c", code, str(renders["host"]), str(wire), FLEET],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 9, done.stderr
    journal = renders["host"].with_name(contract.SNAPSHOT + "-journal")
    assert journal.exists()
    read = Cache(renders["host"].parent, fleet=FLEET).snapshot()
    assert read.value is None and "unreadable" in (read.note or "")
    sync._settle_journal(renders["host"])
    assert not journal.exists()
    assert snapshot_rows(renders["host"]) == before
    delta.apply(renders["host"], renders["delta"], fleet=FLEET)  # and the delta still applies
    assert snapshot_rows(renders["host"]) == snapshot_rows(renders["v2"])
