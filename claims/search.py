"""search_claims: the server's claim search. Read-only.

Today it is Postgres full-text search (the generated `search_vector`, websearch syntax,
ts_rank), with the bridge's filters and row caps. Hybrid ranking with the embeddings is
issue 7's to add here; callers only see ranked claims and `truncated`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F

from claims.models import Claim
from fleet.models import Fleet

MAX_ROWS = 200
DEFAULT_K = 10
CONFIG = "english"  # must match the config of Claim.search_vector


@dataclass(frozen=True)
class SearchResult:
    claims: list[Claim]  # best first, each with a `rank` attribute
    truncated: bool  # more matches existed than were returned


def clamp(k: int, lo: int = 1, hi: int = MAX_ROWS) -> int:
    return min(max(int(k), lo), hi)


def search_claims(
    fleet: Fleet,
    query: str,
    *,
    k: int = DEFAULT_K,
    scope: str | None = None,
    subject: str | None = None,
    claim_type: str | None = None,
    statuses: Iterable[str] = (Claim.Status.PROMOTED,),
) -> SearchResult:
    """The fleet's claims matching `query` (websearch syntax), best first, at most k."""
    k = clamp(k)
    terms = SearchQuery(query, search_type="websearch", config=CONFIG)
    qs = Claim.objects.for_fleet(fleet).filter(search_vector=terms, status__in=list(statuses))
    if scope:
        qs = qs.filter(scope=scope)
    if subject:
        qs = qs.filter(subject=subject)
    if claim_type:
        qs = qs.filter(type=claim_type)
    ranked = qs.annotate(rank=SearchRank(F("search_vector"), terms)).order_by(
        "-rank", "-independent_sessions", "number"
    )
    rows = list(ranked.defer("embedding", "search_vector")[: k + 1])
    return SearchResult(claims=rows[:k], truncated=len(rows) > k)
