"""Everything a moderator needs to judge one proposed claim, gathered read-only.

The review page shows the claim, its evidence, what the promotion gate would say, and the
claims it most likely duplicates or contradicts. Nothing here writes; deciding is
claims.moderation's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote

from django.db import connection, transaction
from pgvector.django import CosineDistance

from claims import conflicts, moderation
from claims.models import Claim, ClaimEvent, ClaimQuerySet, Evidence
from fleet import lineage
from fleet.models import Fleet, Session

NEIGHBOURS = 5
DUPLICATE_SIMILARITY = conflicts.DUPLICATE_SIMILARITY
# HNSW's default ef_search (40) returns too few candidates once other fleets' rows are
# filtered out; 100 plus an iterative scan finds the real nearest neighbours in the fleet.
EF_SEARCH = 100


@dataclass(frozen=True)
class Neighbour:
    claim: Claim
    why: str  # "same text", "similar", "same subject"
    similarity: float | None = None
    of: Claim | None = None  # the claim under review

    @cached_property
    def comparison(self) -> conflicts.Comparison | None:
        """Both texts token by token, the differing ones marked (neighbour left)."""
        return None if self.of is None else conflicts.compare(self.claim.text, self.of.text)

    @property
    def relation(self) -> str | None:
        """conflicts.DUPLICATE, conflicts.CONFLICT, or None (just related)."""
        if self.why == "same text":
            return conflicts.DUPLICATE
        if self.similarity is None or self.of is None:
            return None
        return conflicts.relation(self.claim.text, self.of.text, self.similarity)

    @property
    def likely_duplicate(self) -> bool:
        return self.relation == conflicts.DUPLICATE

    @property
    def possible_conflict(self) -> bool:
        return self.relation == conflicts.CONFLICT


@dataclass(frozen=True)
class Citation:
    """One piece of evidence as a moderator checks it."""

    evidence: Evidence
    verified: bool  # the fleet saw this session from one of its agents (counts)
    session: Session | None  # its row, for the outcome and summary, when verified
    url: str | None  # path@commit in the repository, when the fleet has a URL template


@dataclass(frozen=True)
class Review:
    claim: Claim
    evidence: list[Citation]
    problems: list[str]
    neighbours: list[Neighbour]
    events: list[ClaimEvent]
    has_embedding: bool
    sessions_now: int  # what the gate would count right now (may exceed the stored count)

    @property
    def unverified(self) -> int:
        return sum(1 for c in self.evidence if not c.verified)


def review_of(claim: Claim) -> Review:
    """Assemble the review page's facts for `claim` (a handful of queries, none per row)."""
    evidence = citations_of(claim)
    verified = {c.evidence.session_id for c in evidence if c.verified}
    return Review(
        claim=claim,
        evidence=evidence,
        problems=moderation.gate_problems(claim),
        neighbours=neighbours_of(claim),
        events=list(claim.events.select_related("actor_user", "actor_agent", "actor_token")),
        has_embedding=claim.embedding is not None,
        # the same count as moderation.session_count, from the rows already fetched
        sessions_now=lineage.independent_among_verified(claim.fleet, verified),
    )


def citations_of(claim: Claim) -> list[Citation]:
    """The claim's evidence with, per citation, whether its session is verified, that
    session's row (agent, outcome, summary) and a link to the cited file when possible."""
    cited = list(claim.evidence.select_related("agent"))
    sessions = lineage.verified_session_rows(claim.fleet, [e.session_id for e in cited])
    return [
        Citation(e, e.session_id in sessions, sessions.get(e.session_id), file_url(claim.fleet, e))
        for e in cited
    ]


def file_url(fleet: Fleet, evidence: Evidence) -> str | None:
    """The fleet's repo_url_template filled with repo, path and commit (each URL-quoted);
    None without a template, a path or a commit, or if the result is not http(s)."""
    template = fleet.repo_url_template
    if not template or not evidence.path or not evidence.commit:
        return None
    repo = evidence.repo.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    try:
        url = template.format(
            repo=quote(repo, safe=""),
            path=quote(evidence.path.lstrip("/"), safe="/"),
            commit=quote(evidence.commit, safe=""),
        )
    except (KeyError, IndexError, ValueError):
        return None
    return url if url.startswith(("https://", "http://")) else None


def neighbours_of(claim: Claim, k: int = NEIGHBOURS) -> list[Neighbour]:
    """Same-text claims, then the nearest by cosine, then same-subject ones; no repeats."""
    found = [Neighbour(c, "same text", 1.0, claim) for c in exact_matches(claim)]
    found += [n for n in nearest(claim, k) if n.claim.pk not in {f.claim.pk for f in found}]
    seen = {n.claim.pk for n in found}
    found += [
        Neighbour(c, "same subject", None, claim)
        for c in same_subject(claim, k)
        if c.pk not in seen
    ]
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
    return [Neighbour(c, "similar", round(1 - float(c.distance), 3), claim) for c in rows]
