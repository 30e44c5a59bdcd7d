"""search_claims: the server's claim search — Postgres full text and pgvector, fused. Read-only.

Two candidate lists, fused by the very function the bridge uses (mcp_bridge.contract.ranking), so
the REST API and an agent's memory_search rank the same data the same way:

1. Lexical: the generated `search_vector` (text weight A, subject B, english config)
   against websearch_to_tsquery — conjunctive, as the bridge's FTS5 pass is; when that
   finds fewer than k, a disjunctive pass over the same terms appends more. Ranked by
   ts_rank (length-normalised), at most ranking.CANDIDATES rows.
2. Vector: cosine distance over the HNSW index, `hnsw.ef_search` set to the rows asked
   for inside the vector query's own transaction (the default 40 cannot fill a list;
   see tests/claims/test_search_hnsw.py), cosine ≥ ranking.MIN_COSINE, CANDIDATES rows.

Then score = LEXICAL_WEIGHT·w·RRF(lexical) + RRF(vector), × confidence × recency ×
(1 − staleness), where
w is a lexical hit's query coverage (idf-weighted share of the terms it matches, see
mcp_bridge.contract.ranking) raised to ranking.COVERAGE_POWER; conjunctive hits have w = 1.
Superseded and expired claims leave default results (`include_inactive=True` keeps them);
stale ones stay, rank lower and carry `stale = True`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import psycopg
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from claims import embeddings
from claims.models import Claim, ClaimQuerySet
from fleet.models import Fleet
from mcp_bridge.contract import ranking

log = logging.getLogger(__name__)

MAX_ROWS = 200
DEFAULT_K = 10
CONFIG = "english"  # must match the config of Claim.search_vector
# ts_rank weights {D, C, B, A}: subject (B) weighs half the text (A), as the bridge's BM25.
WEIGHTS = [0.1, 0.2, 0.5, 1.0]
RANK_NORMALISATION = 1  # divide by 1 + log(length): long claims do not win on bulk
# The HNSW candidate queue is embeddings.ef_search: as deep as the rows a scan returns
# (ranking.depth), never below embeddings.EF_SEARCH. Twice that floor (200, as before)
# cost 1.8x the Postgres CPU per vector scan at 100k claims; in search_eval only SciFact's
# server recall@100 moved (0.9471 -> 0.9446; nDCG@10, recall@5 and MRR unchanged on every
# set): docs/search.md.

SIZE_TTL = 60.0  # seconds a fleet's collection size (idf's N) is reused, per process
_sizes: dict[tuple[int, tuple[str, ...]], tuple[float, int]] = {}

Method = Literal["hybrid", "lexical", "vector"]


@dataclass(frozen=True)
class SearchResult:
    claims: list[Claim]  # best first, each with `rank`, `stale`, `lexical_rank`, `vector_rank`
    truncated: bool  # more matches existed than were returned
    mode: str = "hybrid"  # what actually ran: hybrid, lexical (no vector) or vector


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
    include_inactive: bool = False,
    method: Method = "hybrid",
    now: datetime | None = None,
) -> SearchResult:
    """The fleet's claims best matching `query` (websearch syntax and meaning), at most k."""
    k, now = clamp(k), now or timezone.now()
    everything = collection(fleet, statuses)
    narrow = narrowing(scope, subject, claim_type, include_inactive, now)
    n = ranking.depth(k)
    qvec = _query_vector(query) if method != "lexical" else None
    mode = "lexical" if qvec is None else method
    where = _filters(everything, narrow)
    lexical, cover = (
        _lexical_lists(where, query, k, n, lambda: collection_size(fleet, statuses))
        if method != "vector"
        else ([], {})
    )
    vector = _nearest(where, qvec, n) if qvec is not None else []
    rows = where.rows  # read with the lists; _rows for any a list did not bring
    rows.update(_rows([pk for pk in [*lexical, *vector] if pk not in rows]))
    public = {pk: row.public_id for pk, row in rows.items()}
    fused = ranking.fuse(
        [public[pk] for pk in lexical if pk in rows],
        [public[pk] for pk in vector if pk in rows],
        {row.public_id: factors(row, now) for row in rows.values()},
        coverage={public[pk]: c for pk, c in cover.items() if pk in rows},
    )
    by_id = {row.public_id: row for row in rows.values()}
    lex_rank = {public[pk]: i for i, pk in enumerate(lexical, 1) if pk in rows}
    vec_rank = {public[pk]: i for i, pk in enumerate(vector, 1) if pk in rows}
    out = []
    for public_id, score in fused[:k]:
        claim = by_id[public_id].claim()
        claim.rank, claim.stale = score, claim.staleness > 0  # type: ignore[attr-defined]
        claim.lexical_rank = lex_rank.get(public_id)  # type: ignore[attr-defined]
        claim.vector_rank = vec_rank.get(public_id)  # type: ignore[attr-defined]
        out.append(claim)
    return SearchResult(claims=out, truncated=len(fused) > k, mode=mode)


def candidates(
    fleet: Fleet,
    statuses: Iterable[str],
    scope: str | None,
    subject: str | None,
    claim_type: str | None,
    include_inactive: bool,
    now: datetime,
) -> ClaimQuerySet:
    """The rows a search may return: fleet, status, filters, and (by default) still valid."""
    narrow = narrowing(scope, subject, claim_type, include_inactive, now)
    return collection(fleet, statuses).filter(narrow)


def collection(fleet: Fleet, statuses: Iterable[str]) -> ClaimQuerySet:
    """What document frequencies count over: the fleet's claims of the searched statuses,
    superseded and expired included, filters ignored — what the bridge's snapshot holds."""
    return Claim.objects.for_fleet(fleet).filter(status__in=list(statuses))


def collection_size(fleet: Fleet, statuses: Iterable[str]) -> int:
    """idf's N: how many claims the collection holds, counted at most once per SIZE_TTL
    seconds per fleet and statuses in this process. Counting a fleet's rows costs
    1.5–7 ms at 10k claims here (fat rows; more before autovacuum) and grows with the
    fleet; N moving by a few claims barely moves idf, and the bridge's N lags the same
    way, by the age of its snapshot."""
    key = (fleet.pk, tuple(sorted(statuses)))
    now = time.monotonic()
    hit = _sizes.get(key)
    if hit is not None and now - hit[0] < SIZE_TTL:
        return hit[1]
    if len(_sizes) >= 1024:
        _sizes.clear()
    size = collection(fleet, statuses).count()
    _sizes[key] = (now, size)
    return size


def narrowing(
    scope: str | None,
    subject: str | None,
    claim_type: str | None,
    include_inactive: bool,
    now: datetime,
) -> Q:
    """What narrows the collection to the rows a search may return (Q() when nothing)."""
    q = Q()
    if not include_inactive:
        q &= Q(superseded_by__isnull=True) & (Q(valid_until__isnull=True) | Q(valid_until__gt=now))
    if scope:
        q &= Q(scope=scope)
    if subject:
        q &= Q(subject__iexact=subject)  # the bridge matches subjects case-blind too
    if claim_type:
        q &= Q(type=claim_type)
    return q


def factors(claim: Claim | _Row, now: datetime) -> ranking.Factors:
    """The ranking factors of a claim, computed exactly as the bridge computes them."""
    when = claim.promoted_at or claim.created_at
    age = (now - when).total_seconds() / 86400 if when else 365.0
    return ranking.Factors(
        confidence=float(claim.confidence), age_days=age, staleness=float(claim.staleness)
    )


# -- the statements ------------------------------------------------------------------------
#
# Hand-written over filters the ORM compiles once per search (`_Filters`): the ORM built
# each of these statements (ts_rank, window counts, one placeholder per id) in 2-6 ms of
# CPU per search, longer than Postgres took to run them at 10k claims. The filters stay
# the one definition (`collection`, `narrowing`); the SQL below is what the ORM queries
# it replaced compiled to, ordering and ties included.

_TABLE = Claim._meta.db_table
_TSQUERY = f"websearch_to_tsquery('{CONFIG}'::regconfig, %s)"
_WEIGHTS = "{" + ",".join(str(w) for w in WEIGHTS) + "}"
_RANK = f"ts_rank('{_WEIGHTS}'::float4[], search_vector, {_TSQUERY}, {RANK_NORMALISATION})"


@dataclass(frozen=True)
class _Filters:
    """The collection's and the narrowing's WHERE clauses over `claims_claim`, compiled;
    and the candidate rows the statements read along the way (`_COLUMNS`, by id), so no
    statement has to read them again."""

    collection: tuple[str, list[Any]]
    narrow: tuple[str, list[Any]]  # ("", []) when nothing narrows
    rows: dict[int, _Row] = field(default_factory=dict)

    @property
    def base(self) -> tuple[str, list[Any]]:
        """collection AND narrow: the rows a search may return."""
        (c, cp), (nw, np_) = self.collection, self.narrow
        return (f"{c} AND {nw}", [*cp, *np_]) if nw else (c, list(cp))


def _where(qs: ClaimQuerySet) -> tuple[str, list[Any]]:
    """A queryset's WHERE clause as SQL over claims_claim's own columns."""
    query = qs.query
    sql, params = query.get_compiler(connection=connection).compile(query.where)
    if not sql:
        return "TRUE", []
    if any(f'"{alias}".' in sql for alias in query.alias_map if alias != _TABLE):
        raise ValueError("search filters must not join other tables")  # a programming error
    return sql, list(params)


def _filters(everything: ClaimQuerySet, narrow: Q) -> _Filters:
    narrowed = _where(Claim.objects.filter(narrow)) if narrow else ("", [])
    return _Filters(_where(everything), narrowed)


def _fetch(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cast("list[tuple[Any, ...]]", cur.fetchall())


def _lexical(
    everything: ClaimQuerySet, narrow: Q, query: str, k: int, n: int, size: Callable[[], int]
) -> tuple[list[int], dict[int, float]]:
    """Conjunctive websearch first; any-term when that found fewer than k. Returns the
    ids and, for the any-term tail, each hit's query coverage (ranking.coverage, document
    frequencies counted over `everything`); conjunctive hits cover the whole query."""
    return _lexical_lists(_filters(everything, narrow), query, k, n, size)


def _lexical_lists(
    where: _Filters, query: str, k: int, n: int, size: Callable[[], int]
) -> tuple[list[int], dict[int, float]]:
    terms = ranking.query_terms(query)
    if not terms:
        return [], {}
    found = _ranked_text(where, query, n)
    if len(found) >= k or len(terms) == 1:
        return found, {}
    seen = set(found)
    tail, df = _anyterm_rows(where, terms, n)
    tail = [row for row in tail if row[0] not in seen][: n - len(found)]
    if not tail:
        return found, {}
    total = size()
    cover = {
        pk: ranking.coverage(
            terms, {t for t, hit in zip(terms, flags, strict=True) if hit}, df, total
        )
        for pk, flags in tail
    }
    return found + [pk for pk, _ in tail], cover


def _ranked_text(where: _Filters, query: str, n: int) -> list[int]:
    """The top n of the rows `where` keeps matching the websearch query, by ts_rank."""
    sql, params = where.base
    rows = _fetch(
        f"SELECT {_SELECT} FROM {_TABLE} WHERE {sql} AND search_vector @@ {_TSQUERY} "
        f"ORDER BY {_RANK} DESC, number ASC LIMIT %s",
        [*params, query, query, n],
    )
    where.rows.update((row[0], _Row(row)) for row in rows)
    return [row[0] for row in rows]


def _anyterm(
    everything: ClaimQuerySet, narrow: Q, terms: Sequence[str], n: int
) -> tuple[list[tuple[int, tuple[bool, ...]]], dict[str, int]]:
    """The any-term pass in one scan of the collection's matches: the top n of the rows
    `narrow` keeps, by rank, each with which terms it matches, and each term's document
    frequency over all the matches (window counts, taken before the limit)."""
    return _anyterm_rows(_filters(everything, narrow), terms, n)


def _anyterm_rows(
    where: _Filters, terms: Sequence[str], n: int
) -> tuple[list[tuple[int, tuple[bool, ...]]], dict[str, int]]:
    # Terms are \w+ runs, so "a or b" cannot be a websearch syntax error.
    collection_sql, collection_params = where.collection
    narrow_sql, narrow_params = where.narrow
    flags = ", ".join(f"search_vector @@ {_TSQUERY}" for _ in terms)
    counts = ", ".join(
        f"count(id) FILTER (WHERE search_vector @@ {_TSQUERY}) OVER ()" for _ in terms
    )
    rows = _fetch(
        f"SELECT id, {narrow_sql or 'TRUE'} AS keep, {flags}, {counts}, {_SELECT} "
        f"FROM {_TABLE} "
        f"WHERE {collection_sql} AND search_vector @@ {_TSQUERY} "
        f"ORDER BY keep DESC, {_RANK} DESC, number ASC LIMIT %s",
        [
            *narrow_params, *terms, *terms, *collection_params,
            " or ".join(terms), " or ".join(terms), n,
        ],
    )
    m = len(terms)
    df = {t: int(rows[0][2 + m + i]) for i, t in enumerate(terms)} if rows else {}
    where.rows.update((row[0], _Row(row[2 + 2 * m :])) for row in rows if row[1])
    return [(row[0], tuple(row[2 : 2 + m])) for row in rows if row[1]], df


def _query_vector(query: str) -> Any:
    """The query's vector, or None when the embedder cannot run (search stays lexical)."""
    text = query.strip()[:2000]
    if not ranking.query_terms(text):
        return None
    try:
        return embeddings.query_vector(text)
    except Exception:  # a broken model install degrades to lexical, never to an error
        log.exception("query embedder failed; searching lexically")
        return None


_SCAN = "SET LOCAL hnsw.ef_search = %s; SET LOCAL hnsw.iterative_scan = relaxed_order; "


def _vector(base: ClaimQuerySet, qvec: Any, n: int) -> list[int]:
    """Nearest n by cosine over the HNSW index, at or above ranking.cosine_floor.

    The scan's settings (as `hnsw_scan` makes them) and the query travel as one
    multi-statement query: outside a transaction Postgres runs it as one implicit
    transaction, which SET LOCAL lasts for, so a search pays one round trip here, not
    five (BEGIN, two SETs, the query, COMMIT) — each a wait for a CPU on a busy host.
    Inside a caller's transaction the settings last until that one ends, as
    `hnsw_scan`'s do.

    The relaxed iterative scan may hand rows over slightly out of order (it keeps a
    nearer row found late, where strict_order drops it and scans on); they are sorted
    here by their exact distance, which the rows carry.
    """
    return _nearest(_Filters(_where(base), ("", [])), qvec, n)


def _nearest(where: _Filters, qvec: Any, n: int) -> list[int]:
    sql, params = where.base
    query = (
        f"SELECT id, embedding <=> %s AS distance, {_SELECT} FROM {_TABLE} WHERE {sql} "
        "AND embedding IS NOT NULL AND embedding_model = %s ORDER BY 2 ASC LIMIT %s"
    )
    params = [_vector_param(qvec), *params, embeddings.embedder().NAME, n]
    with connection.cursor() as cur:
        if isinstance(cur.cursor, psycopg.ClientCursor):
            cur.execute(_SCAN + query, [embeddings.ef_search(n), *params])
            while cur.description is None and cur.nextset():  # past the two SETs
                pass
            rows = cur.fetchall()
        else:  # server-side binding (OPTIONS): one statement per call, so a transaction
            with embeddings.hnsw_scan(n, order="relaxed_order"):
                cur.execute(query, params)
                rows = cur.fetchall()
    where.rows.update((row[0], _Row(row[2:])) for row in rows)
    found = sorted(rows, key=lambda row: (row[1], row[0]))
    if not found:
        return []
    floor = ranking.cosine_floor(1.0 - float(found[0][1]))
    return [row[0] for row in found if 1.0 - row[1] >= floor]


def _vector_param(qvec: Any) -> Any:
    """The query vector as the embedding column's field sends it to the database."""
    return Claim._meta.get_field("embedding").get_db_prep_value(qvec, connection)


def vector_query(base: ClaimQuerySet, qvec: Any) -> Any:
    """(pk, cosine distance) of the current model's vectors, nearest first."""
    return embeddings.nearest_query(base, qvec).values_list("pk", "distance")



# What a search reads of each candidate: its ranking factors and what the API returns
# (RankedClaimSerializer), in the model's column order (Model.from_db wants that order);
# the embedding and search vector stay in the database.
_SHOWN = frozenset(
    {
        "id", "fleet_id", "number", "text", "type", "subject", "scope", "status",
        "contested", "confidence", "staleness", "independent_sessions", "created_at",
        "promoted_at", "valid_until", "superseded_by_id", "screen_flags", "screen_released_at",
        "proposed_by_id",
    }
)
_COLUMNS = [f.attname for f in Claim._meta.concrete_fields if f.attname in _SHOWN]
_SELECT = ", ".join(_COLUMNS)
_AT = {name: i for i, name in enumerate(_COLUMNS)}


class _Row:
    """A candidate as read (a tuple): the factors fusion needs, and a Claim made from it
    only when it is among the k returned — building ~200 model instances per search to
    return 10 cost more than the query that read them."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    number = property(lambda self: self.values[_AT["number"]])
    # The model's own rule (cc-NN), read off `number`; to mypy a property of Claim only.
    public_id = cast(property, Claim.public_id)
    confidence = property(lambda self: self.values[_AT["confidence"]])
    staleness = property(lambda self: self.values[_AT["staleness"]])
    promoted_at = property(lambda self: self.values[_AT["promoted_at"]])
    created_at = property(lambda self: self.values[_AT["created_at"]])

    def claim(self) -> Claim:
        return Claim.from_db(connection.alias, _COLUMNS, self.values)


def _rows(pks: Sequence[int]) -> dict[int, _Row]:
    unique = list(dict.fromkeys(pks))
    if not unique:
        return {}
    found = _fetch(f"SELECT {_SELECT} FROM {_TABLE} WHERE id = ANY(%s)", [unique])
    return {values[0]: _Row(values) for values in found}
