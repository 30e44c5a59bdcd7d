"""The HNSW path against an exact scan at ~1k rows: ef_search must be raised per query.

With one fleet in the test database the planner prefers the fleet's btree index plus an
exact sort for the fleet-filtered query (as it should for a small fleet), so these tests
run the very query search uses without the fleet filter, on the HNSW index (checked with
EXPLAIN): only this test's rows exist inside its transaction.
"""

from __future__ import annotations

import numpy as np
from django.db import connection, transaction

from claims import embeddings, search
from claims.models import Claim
from fleet.models import Fleet
from mcp_bridge.contract import embed

N = 1000


def _fill(fleet: Fleet, rng: np.random.Generator) -> tuple[list[int], np.ndarray]:
    # Clustered vectors, as real claims are (subjects), not uniform noise.
    centres = rng.normal(size=(20, embed.DIMS))
    vectors = centres[rng.integers(0, 20, N)] + 0.6 * rng.normal(size=(N, embed.DIMS))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = Claim.objects.bulk_create(
        Claim(
            fleet=fleet,
            number=i + 1,
            text=f"claim {i}",
            type="fact",
            subject="s",
            text_hash="0" * 64,
            embedding=v.astype(np.float32),
            embedding_model=embed.NAME,
        )
        for i, v in enumerate(vectors)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE claims_claim")
    return [c.pk for c in rows], vectors


def _query(rng: np.random.Generator, vectors: np.ndarray) -> np.ndarray:
    q = vectors[rng.integers(0, N)] + 0.5 * rng.normal(size=embed.DIMS) / np.sqrt(embed.DIMS)
    return (q / np.linalg.norm(q)).astype(np.float32)


def _hnsw(q: np.ndarray, n: int, *, raised: bool) -> tuple[list[int], str]:
    qs = search.vector_query(Claim.objects.all(), q)[:n]
    with transaction.atomic(), connection.cursor() as cur:
        # At 1k rows an exact scan is cheaper and the planner knows it (a sequential scan, or
        # the embedded-claims index and a sort); at 100k it is not. Force HNSW here: the
        # index drop is rolled back with the test's transaction.
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("DROP INDEX IF EXISTS claims_claim_embedded")
        if not raised:
            return [pk for pk, _ in qs], qs.explain()
        with embeddings.hnsw_scan(n):
            return [pk for pk, _ in qs], qs.explain()


def test_the_hnsw_path_finds_the_exact_nearest_neighbours(fleet_a: Fleet) -> None:
    rng = np.random.default_rng(7)
    pks, vectors = _fill(fleet_a, rng)
    recall_10, recall_100 = [], []
    for _ in range(20):
        q = _query(rng, vectors)
        exact = [pks[i] for i in np.argsort(-(vectors @ q))[:100]]
        found, plan = _hnsw(q, 100, raised=True)
        assert "claims_claim_embedding_hnsw" in plan
        recall_10.append(len(set(found[:10]) & set(exact[:10])) / 10)
        recall_100.append(len(set(found) & set(exact)) / 100)
    assert np.mean(recall_10) >= 0.95, recall_10
    assert np.mean(recall_100) >= 0.9, recall_100


def test_the_default_ef_search_cannot_fill_a_candidate_list(fleet_a: Fleet) -> None:
    """Why hnsw_scan exists: at the default ef_search a scan stops at 40 rows."""
    rng = np.random.default_rng(11)
    _, vectors = _fill(fleet_a, rng)
    q = _query(rng, vectors)
    default, plan = _hnsw(q, 100, raised=False)
    raised, _ = _hnsw(q, 100, raised=True)
    assert "claims_claim_embedding_hnsw" in plan
    assert len(default) <= 40 < len(raised) == 100
