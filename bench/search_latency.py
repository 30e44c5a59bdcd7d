"""Search latency: server hybrid search at 10k and 100k claims, bridge search at 10k and
100k claims.

Throwaway fleets (deleted at the end). Claim texts come from mcp_bridge.testing's
synthetic vocabulary; every claim carries a vector (seeded random unit vectors under the
current model's name: latency does not depend on what they mean; the eval uses real
embeddings), so the server's hybrid runs both lists. The database is vacuumed and
analyzed (ctxlake_site.db_health) after seeding, before timing; the load average is
printed beside every figure. Query vectors are embedded once before timing, so search
p50 excludes embedding; the embedder's load time and per-query embed time are reported
separately, as is `reembed_claims` throughput (real model, 1k claims). At each server
size the vector list search ships (HNSW, claims.embeddings.EF_SEARCH, relaxed iterative scan)
is compared with an exact scan: recall@10 and recall@100 of the true nearest rows.

    /work/main/.venv/bin/python bench/search_latency.py [--queries 200] [--server 10000 100000]

Targets (issue 7, 17): server p50 <= 30 ms at 10k; bridge p50 <= 10 ms at 10k, <= 25 ms at
100k.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims import embeddings, search, snapshot_render  # noqa: E402
from claims.models import Claim  # noqa: E402
from claims.search import search_claims  # noqa: E402
from ctxlake_site import db_health  # noqa: E402
from fleet.models import Fleet  # noqa: E402
from mcp_bridge import testing  # noqa: E402
from mcp_bridge.contract import embed  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402

QUERIES = [
    "flaky test retries", "deploy staging vpn", "refund rounding", "cache invalidation",
    "migration lock table", "why does the build fail", "token expiry", "lint gate warnings",
]


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, embed.DIMS)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fill(n: int, *, vectors: bool = True) -> Fleet:
    fleet = Fleet.objects.create(slug=f"bench-lat-{uuid.uuid4().hex[:8]}", name="latency",
                                 memory_mode="live")
    rows = testing.synthetic_claims(n)
    matrix = unit_vectors(n, 1) if vectors else None
    now = timezone.now()
    for start in range(0, n, 5000):
        Claim.objects.bulk_create(
            Claim(fleet=fleet, number=i + 1, text=rows[i]["text"], type="fact",
                  subject=rows[i]["subject"], scope="fleet", status="promoted",
                  promoted_at=now, independent_sessions=1, text_hash="0" * 64,
                  embedding=matrix[i] if matrix is not None else None,
                  embedding_model=embed.NAME if matrix is not None else "")
            for i in range(start, min(n, start + 5000))
        )
    db_health.vacuum()  # fresh: dead rows gone, statistics current
    return fleet


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def p50(samples: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in samples)
    return statistics.median(ms), ms[int(len(ms) * 0.95) - 1]


def timed(fn, queries: list[str], rounds: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    for q in queries:
        fn(q)  # warm
    samples = []
    for i in range(rounds):
        q = queries[i % len(queries)]
        t = time.perf_counter()
        fn(q)
        samples.append(time.perf_counter() - t)
    return p50(samples)


def server_query(fleet: Fleet, method: Any, q: str) -> object:
    return search_claims(fleet, q, k=10, method=method)


# The lexical list as it was before BM25 (Postgres ts_rank over the generated
# search_vector, english config): the baseline the BM25 statements are timed against, in
# the same run, interleaved query by query.
_TSQUERY = "websearch_to_tsquery('english'::regconfig, %s)"
_TSRANK = f"ts_rank('{{0.1,0.2,0.5,1.0}}'::float4[], search_vector, {_TSQUERY}, 1)"


def tsrank_lexical(fleet: Fleet, q: str, k: int = 10) -> list[int]:
    """The previous lexical list's two statements (conjunctive; any-term with window
    document frequencies when that found fewer than k), coverage left out."""
    base = f"fleet_id = %s AND status = 'promoted' AND search_vector @@ {_TSQUERY}"
    terms = search.ranking.query_terms(q)
    with connection.cursor() as cur:
        cur.execute(f"SELECT id FROM claims_claim WHERE {base} ORDER BY {_TSRANK} DESC, "
                    "number LIMIT 100", [fleet.pk, q, q])
        found = [r[0] for r in cur.fetchall()]
        if len(found) >= k or len(terms) < 2:
            return found
        anyterm = " or ".join(terms)
        counts = ", ".join(f"count(id) FILTER (WHERE search_vector @@ {_TSQUERY}) OVER ()"
                           for _ in terms)
        cur.execute(f"SELECT id, {counts} FROM claims_claim WHERE {base} "
                    f"ORDER BY {_TSRANK} DESC, number LIMIT 100",
                    [*terms, fleet.pk, anyterm, anyterm])
        return found + [r[0] for r in cur.fetchall()]


def bm25_lexical(fleet: Fleet, q: str, k: int = 10) -> list[int]:
    """The shipped lexical list (BM25 over ClaimTerm rows), coverage included."""
    everything = search.collection(fleet, ["promoted"])
    narrow = search.narrowing(None, None, None, False, timezone.now())
    stats = partial(search.collection_stats, fleet, ["promoted"])
    return search._lexical(fleet, everything, narrow, q, k, 100, stats)[0]


# The first BM25 statement (2026-12-04 noon), kept as a baseline: it joined every match of
# every term to its claim (status, length, number, the narrowing) before counting and
# scoring; the shipped one reads those from the term rows (claims.lexicon.COPIES) and
# visits a claim only while taking the best n. Same parameters, same results.
_PREVIOUS_BM25 = f"""
WITH q AS (SELECT term, i - 1 AS i FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)),
hits AS (
    SELECT t.claim_id, q.i, t.text_count * {search._W_TEXT} + t.subject_count
           * {search._W_SUBJECT} AS f
    FROM q JOIN claims_claimterm t ON t.fleet_id = %(fleet)s AND t.term = q.term
    UNION ALL
    SELECT pc, pi, pf FROM unnest(%(pc)s::bigint[], %(pi)s::bigint[], %(pf)s::float8[])
                           AS e(pc, pi, pf)
),
found AS (
    SELECT h.claim_id, h.i, h.f, claims_claim.lexical_length AS len, claims_claim.number,
           (%(narrow)s) AS keep
    FROM hits h JOIN claims_claim ON claims_claim.id = h.claim_id
    WHERE %(collection)s
),
df AS (SELECT i, count(*)::float8 AS df FROM found GROUP BY i),
scored AS (
    SELECT f.claim_id, min(f.number) AS claim_number, array_agg(f.i ORDER BY f.i) AS matched,
           sum({search._IDF} * {search._SATURATION} ORDER BY f.i) AS score
    FROM found f JOIN df USING (i) WHERE f.keep GROUP BY f.claim_id
),
chosen AS (
    (SELECT *, TRUE AS every FROM scored WHERE cardinality(matched) = %(m)s
     ORDER BY score DESC, claim_number ASC LIMIT %(limit)s)
    UNION ALL
    (SELECT *, FALSE FROM scored ORDER BY score DESC, claim_number ASC LIMIT %(tail)s)
)
SELECT s.every, s.matched, (SELECT array_agg(i ORDER BY i) FROM df),
       (SELECT array_agg(df ORDER BY i) FROM df), {{select}}
FROM chosen s JOIN claims_claim ON claims_claim.id = s.claim_id
ORDER BY s.every DESC, s.score DESC, s.claim_number ASC
"""


def previous_bm25_lexical(fleet: Fleet, q: str, k: int = 10) -> list[int]:
    """bm25_lexical with the first BM25 statement swapped in."""
    shipped, on_terms = search._BM25, search._on_terms
    search._BM25, search._on_terms = _PREVIOUS_BM25, lambda sql: sql  # type: ignore[assignment]
    try:
        return bm25_lexical(fleet, q, k)
    finally:
        search._BM25, search._on_terms = shipped, on_terms  # type: ignore[assignment]


def lexical_pair(fleet: Fleet, rounds: int) -> str:
    """p50 of the BM25 lexical list against its first statement and the ts_rank baseline,
    interleaved query by query (the order rotated every round); the lists are checked equal
    to the first statement's."""
    fns = (bm25_lexical, previous_bm25_lexical, tsrank_lexical)
    times: list[list[float]] = [[], [], []]
    for q in QUERIES:
        [fn(fleet, q) for fn in fns]  # warm
        assert bm25_lexical(fleet, q) == previous_bm25_lexical(fleet, q), q
    for i in range(rounds):
        q = QUERIES[i % len(QUERIES)]
        order = [(i + j) % 3 for j in range(3)]
        for j in order:
            t = time.perf_counter()
            fns[j](fleet, q)
            times[j].append(time.perf_counter() - t)
    (a, a95), (b, b95), (c, c95) = (p50(x) for x in times)
    return (f"lexical list alone: BM25 p50 {a:.1f} ms p95 {a95:.1f}; the first BM25 statement "
            f"p50 {b:.1f} ms p95 {b95:.1f}; ts_rank baseline p50 {c:.1f} ms p95 {c95:.1f} "
            "(interleaved)")


def vector_recall(fleet: Fleet) -> str:
    """Recall of the shipped vector scan (before its cosine floor) against an exact scan
    of the same rows."""
    base = search.candidates(fleet, [Claim.Status.PROMOTED], None, None, None, False,
                             timezone.now())
    at10, at100 = [], []
    for q in QUERIES:
        qvec = embed.embed_query(q)
        # the scan as search runs it (ef_search, relaxed order, re-sorted), before the
        # cosine floor: random unit vectors sit below ranking.MIN_COSINE of any real query
        with embeddings.hnsw_scan(embeddings.ef_search(100), order="relaxed_order"):
            scanned = sorted(search.vector_query(base, qvec)[:100], key=lambda r: (r[1], r[0]))
        shipped = [pk for pk, _ in scanned]
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET LOCAL enable_indexscan = off")  # exact: scan and sort every row
            exact = [pk for pk, _ in search.vector_query(base, qvec)[:100]]
        at10.append(len(set(shipped[:10]) & set(exact[:10])) / 10)
        at100.append(len(set(shipped) & set(exact)) / 100)
    return (f"vector list recall vs exact scan: @10 {statistics.mean(at10):.3f}, "
            f"@100 {statistics.mean(at100):.3f} (ef_search {embeddings.EF_SEARCH}, "
            f"{len(QUERIES)} queries)")


def bridge_query(snap: Snapshot):  # type: ignore[no-untyped-def]
    return lambda q: snap.search(q, k=10, query_vector=embed.embed_query(q))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--server-only", action="store_true",
                        help="stop after the server sizes (no bridge, reembed or render)")
    parser.add_argument("--server", type=int, nargs="*", default=[10_000, 100_000],
                        help="claims in the server fleets (the first one must be 10k or less: "
                             "it is kept for the snapshot render)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)  # a fresh CTXLAKE_HOME's database has no schema yet
    t = time.perf_counter()
    embed.model()
    load = time.perf_counter() - t
    fresh = [f"{q} number {i}" for i, q in enumerate(QUERIES * 10)]
    t = time.perf_counter()
    for q in fresh:
        embed.embed([q])
    per_query = (time.perf_counter() - t) / len(fresh)
    print(f"embedder {embed.NAME}: load {load * 1000:.0f} ms, one query {per_query * 1000:.1f} ms"
          " (uncached; repeats hit embed_query's cache)")
    for q in QUERIES:
        embed.embed_query(q)

    fleets = []
    try:
        db_health.maintain(commit=True)  # indexes earlier runs bloated are rebuilt first
        for size in args.server:
            fleet = fill(size)
            fleets.append(fleet)
            server, lexical, vector = (
                timed(partial(server_query, fleet, method), QUERIES, args.queries)
                for method in ("hybrid", "lexical", "vector")
            )
            print(f"server {size // 1000}k: hybrid p50 {server[0]:.1f} ms p95 {server[1]:.1f} ms "
                  f"(lexical p50 {lexical[0]:.1f}, vector p50 {vector[0]:.1f}); target p50 <= "
                  f"30 ms at 10k  [{loadavg()}]")
            print(f"  {lexical_pair(fleet, args.queries)}  [{loadavg()}]")
            print(f"  {vector_recall(fleet)}")
            if fleets[0] is not fleet:  # keep the first fleet for the snapshot render below
                fleet.delete()
                fleets.remove(fleet)
        if args.server_only:
            return 0
        fleet = fleets[0]
        for n in (10_000, 100_000):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "snapshot.sqlite"
                testing.write_snapshot(path, "bench", testing.synthetic_claims(n),
                                       vectors=unit_vectors(n, 2))
                snap = Snapshot(path, fleet="bench")
                bridge = timed(bridge_query(snap), QUERIES, args.queries)
                target = 10 if n == 10_000 else 25
                print(f"bridge {n // 1000}k: hybrid p50 {bridge[0]:.2f} ms p95 {bridge[1]:.2f} ms "
                      f"(warm); target p50 <= {target} ms  [{loadavg()}]")
                snap.close()
        small = fill(1000, vectors=False)
        fleets.append(small)
        t = time.perf_counter()
        done = embeddings.embed_claims(Claim.objects.filter(fleet=small))
        rate = done / (time.perf_counter() - t)
        print(f"reembed_claims: {done} claims at {rate:.0f} claims/s (batch {embeddings.BATCH})")
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            snapshot_render.write_snapshot(
                fleet, Path(tmp) / "s.sqlite", generated_at=timezone.now()
            )
            print(f"render snapshot {args.server[0] // 1000}k: "
                  f"{(time.perf_counter() - t) * 1000:.0f} ms  [{loadavg()}]")
    finally:
        for f in fleets:
            f.delete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
