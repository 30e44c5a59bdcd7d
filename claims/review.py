"""Everything a moderator needs to judge one proposed claim, gathered read-only.

The review page shows the claim, its evidence, what the promotion gate would say, and the
claims it most likely duplicates or contradicts. Nothing here writes; deciding is
claims.moderation's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from pgvector.django import CosineDistance

from claims import moderation
from claims.models import Claim, ClaimEvent, ClaimQuerySet, Evidence

NEIGHBOURS = 5
DUPLICATE_SIMILARITY = 0.95  # a near match at or above this is a duplicate (docs/moderation.md)
# HNSW's default ef_search (40) returns too few candidates once other fleets' rows are
# filtered out; 100 plus an iterative scan finds the real nearest neighbours in the fleet.
EF_SEARCH = 100


@dataclass(frozen=True)
class Neighbour:
    claim: Claim
    why: str  # "same text", "similar", "same subject"
    similarity: float | None = None

    @property
    def likely_duplicate(self) -> bool:
        return self.why == "same text" or (self.similarity or 0) >= DUPLICATE_SIMILARITY


@dataclass(frozen=True)
class Review:
    claim: Claim
    evidence: list[Evidence]
    problems: list[str]
    neighbours: list[Neighbour]
    events: list[ClaimEvent]
    has_embedding: bool


def review_of(claim: Claim) -> Review:
    """Assemble the review page's facts for `claim` (a handful of queries, none per row)."""
    return Review(
        claim=claim,
        evidence=list(claim.evidence.select_related("agent")),
        problems=moderation.gate_problems(claim),
        neighbours=neighbours_of(claim),
        events=list(claim.events.select_related("actor_user", "actor_agent")),
        has_embedding=claim.embedding is not None,
    )


def neighbours_of(claim: Claim, k: int = NEIGHBOURS) -> list[Neighbour]:
    """Same-text claims, then the nearest by cosine, then same-subject ones; no repeats."""
    found = [Neighbour(c, "same text", 1.0) for c in exact_matches(claim)]
    found += [n for n in nearest(claim, k) if n.claim.pk not in {f.claim.pk for f in found}]
    seen = {n.claim.pk for n in found}
    found += [Neighbour(c, "same subject") for c in same_subject(claim, k) if c.pk not in seen]
    return found


def _others(claim: Claim) -> ClaimQuerySet:
    return Claim.objects.for_fleet(claim.fleet).exclude(pk=claim.pk).select_related("fleet")


def exact_matches(claim: Claim) -> list[Claim]:
    return list(_others(claim).filter(text_hash=claim.text_hash).order_by("number")[:NEIGHBOURS])


def same_subject(claim: Claim, k: int) -> list[Claim]:
    """Other claims on the subject: where a contradiction would show up without embeddings."""
    return list(_others(claim).filter(subject=claim.subject).order_by("-created_at")[:k])


def nearest(claim: Claim, k: int) -> list[Neighbour]:
    """The k nearest claims of the same fleet by cosine similarity (needs an embedding)."""
    if claim.embedding is None:
        return []
    with transaction.atomic(), connection.cursor() as cursor:
        # SET LOCAL lasts until the end of this transaction only.
        cursor.execute(f"SET LOCAL hnsw.ef_search = {int(EF_SEARCH)}")
        cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        rows = list(
            _others(claim)
            .exclude(embedding=None)
            .annotate(distance=CosineDistance("embedding", claim.embedding))
            .order_by("distance")[:k]
        )
    return [Neighbour(c, "similar", round(1 - float(c.distance), 3)) for c in rows]
