"""Bridge lexical search: any-term hits weigh by their idf-weighted query coverage."""

from __future__ import annotations

from pathlib import Path

from mcp_bridge import testing
from mcp_bridge.contract import ranking
from mcp_bridge.snapshot import Snapshot

COMMON = [
    testing.claim(f"cc-{i:02d}", f"The {what} tests run on every pull request.")
    for i, what in enumerate(("unit", "integration", "smoke", "contract", "browser"), 1)
]


def test_any_term_hits_weigh_by_coverage_counting_superseded_claims(tmp_path: Path) -> None:
    rows = [
        *COMMON,
        testing.claim("cc-06", "The clippy gate fails on any compiler warning."),
        testing.claim("cc-07", "Old: clippy ran only on main.", superseded_by="cc-06"),
    ]
    path = tmp_path / "snapshot.sqlite"
    testing.write_snapshot(path, "f", rows, vectors=None)
    snap = Snapshot(path, fleet="f")
    hits = snap.search("clippy tests", k=10)
    ids = [r["id"] for r in hits.results]
    assert ids[0] == "cc-06" and "cc-07" not in ids and len(ids) == 6
    df, n = {"clippy": 2, "tests": 5}, 7  # the superseded claim counts, as on the server
    _, cover = snap._lexical("clippy tests", 10, testing.NOW, None, None, None)
    by_id = dict(snap.db.execute("SELECT rowid, id FROM claims"))
    cover = {by_id[r]: c for r, c in cover.items()}
    assert cover["cc-06"] == ranking.coverage(["clippy", "tests"], {"clippy"}, df, n)
    assert cover["cc-01"] == ranking.coverage(["clippy", "tests"], {"tests"}, df, n)
    snap.close()


def test_conjunctive_hits_carry_no_coverage_weight(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.sqlite"
    testing.write_snapshot(path, "f", COMMON, vectors=None)
    snap = Snapshot(path, fleet="f")
    found, cover = snap._lexical("unit tests", 1, testing.NOW, None, None, None)
    assert len(found) == 1 and cover == {}  # k found by the AND pass: no tail, full weight
    snap.close()


def test_mode_says_which_lists_ran(tmp_path: Path) -> None:
    """hybrid only when a vector list ran: a query vector over a snapshot without
    embeddings searched lexically, and says so."""
    import numpy as np

    query = np.ones(testing.EMBEDDER["dims"], dtype=np.float32)
    query /= np.linalg.norm(query)
    bare, full = tmp_path / "bare.sqlite", tmp_path / "full.sqlite"
    testing.write_snapshot(bare, "f", COMMON, vectors=None)
    testing.write_snapshot(full, "f", COMMON, vectors="random")
    without, with_vectors = Snapshot(bare, fleet="f"), Snapshot(full, fleet="f")
    assert without.search("unit tests", k=3, query_vector=query).mode == "lexical"
    assert without.search("unit tests", k=3).mode == "lexical"
    assert with_vectors.search("unit tests", k=3, query_vector=query).mode == "hybrid"
    assert with_vectors.search("unit tests", k=3).mode == "lexical"
    assert with_vectors.search("", k=3, query_vector=query).mode == "vector"
    without.close()
    with_vectors.close()


def test_the_lexical_candidates_factors_are_read_before_the_vector_is_waited_for(
        tmp_path: Path) -> None:
    """The host's embedder computes the query's vector while the search reads the lexical
    candidates' factors; the vector-only candidates' are read afterwards, and the answer
    is the one an already-computed vector gives."""
    import numpy as np

    path = tmp_path / "full.sqlite"
    testing.write_snapshot(path, "f", COMMON, vectors="random")
    snap = Snapshot(path, fleet="f")
    query = np.ones(testing.EMBEDDER["dims"], dtype=np.float32)
    query /= np.linalg.norm(query)
    read: list[list[int]] = []
    factors_of = snap._factors_of

    def spy(rowids: list[int], now: object) -> object:
        read.append(list(rowids))
        return factors_of(rowids, now)  # type: ignore[arg-type]

    snap._factors_of = spy  # type: ignore[method-assign]
    lexical, _ = snap._lexical("unit tests", 5, testing.NOW, None, None, None)
    asked_after: list[int] = []

    def vector() -> object:
        asked_after.append(len(read))
        return query

    later = snap.search("unit tests", k=5, query_vector=vector, now=testing.NOW)
    assert asked_after == [1] and read[0] == lexical
    assert not set(read[1]) & set(lexical)  # each candidate's factors read once
    assert later.results == snap.search("unit tests", k=5, query_vector=query,
                                        now=testing.NOW).results
    snap.close()
