"""How a claim's search score is computed: the one definition both search paths share.

Stdlib only and pure, so the server's claims/search.py imports these very constants and
functions and both sides rank the same data the same way:

    score = rrf(lexical_rank) + rrf(vector_rank)          # reciprocal-rank fusion
            × confidence × recency(age_days) × (1 − staleness)

with rrf(rank) = 1 / (RRF_K + rank), rank 1-based, and a missing rank contributing 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

RRF_K = 60  # the usual constant: flattens the head so one list cannot dominate
CANDIDATES = 100  # rows each of the lexical and vector lists contributes to the fusion
MIN_COSINE = 0.2  # below this a vector "match" is noise for all-MiniLM-L6-v2
RECENCY_HALF_LIFE_DAYS = 180.0
RECENCY_FLOOR = 0.5  # an old claim loses at most half its score to age
MIN_CONFIDENCE = 0.05  # a zero-confidence claim still sorts, last
STALE_DEFAULT = 0.5  # staleness of a claim flagged stale without a finer estimate


@dataclass(frozen=True)
class Factors:
    confidence: float
    age_days: float
    staleness: float


def rrf(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / (RRF_K + rank)


def recency(age_days: float) -> float:
    age = max(0.0, age_days)
    return RECENCY_FLOOR + (1.0 - RECENCY_FLOOR) * 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)


def score(lexical_rank: int | None, vector_rank: int | None, f: Factors) -> float:
    fused = rrf(lexical_rank) + rrf(vector_rank)
    confidence = min(1.0, max(MIN_CONFIDENCE, f.confidence))
    freshness = 1.0 - min(1.0, max(0.0, f.staleness))
    return fused * confidence * recency(f.age_days) * freshness


def fuse(lexical: Sequence[str], vector: Sequence[str], factors: Mapping[str, Factors],
         ) -> list[tuple[str, float]]:
    """Fuse two ranked id lists into (id, score), best first; ties break by id."""
    lex = {cid: i + 1 for i, cid in enumerate(lexical)}
    vec = {cid: i + 1 for i, cid in enumerate(vector)}
    ids: Iterable[str] = dict.fromkeys([*lexical, *vector])
    scored = [(cid, score(lex.get(cid), vec.get(cid), factors[cid])) for cid in ids]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored
