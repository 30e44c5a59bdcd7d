"""search_claims: the server's claim search — Postgres full text and pgvector, fused. Read-only.

Two candidate lists, fused by the very function the bridge uses (mcp_bridge.contract.ranking), so
the REST API and an agent's memory_search rank the same data the same way:

1. Lexical: FTS5's BM25 computed over the claims' term rows (ClaimTerm, claims.lexicon),
   cut by the bridge's own tokenizer — conjunctive, as the bridge's FTS5 pass is; when that
   finds fewer than k, a disjunctive pass over the same terms appends more (one statement,
   `_BM25`), at most ranking.CANDIDATES rows.
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
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import psycopg
from django.db import connection
from django.db.models import Count, Q, Sum
from django.utils import timezone

from claims import embeddings, lexicon
from claims.models import Claim, ClaimQuerySet, ClaimTerm
from fleet.models import Fleet
from mcp_bridge.contract import bm25, ranking

log = logging.getLogger(__name__)

MAX_ROWS = 200
DEFAULT_K = 10
# The HNSW candidate queue is embeddings.ef_search: as deep as the rows a scan returns
# (ranking.depth), never below embeddings.EF_SEARCH. Twice that floor (200, as before)
# cost 1.8x the Postgres CPU per vector scan at 100k claims; in search_eval only SciFact's
# server recall@100 moved (0.9471 -> 0.9446; nDCG@10, recall@5 and MRR unchanged on every
# set): docs/search.md.

SIZE_TTL = 60.0  # seconds a fleet's collection statistics (N, avgdl) are reused, per process
_sizes: dict[tuple[int, tuple[str, ...]], tuple[float, Stats]] = {}

Method = Literal["hybrid", "lexical", "vector"]


@dataclass(frozen=True)
class Stats:
    """BM25's collection-wide figures: N (claims) and their terms in all (for avgdl)."""

    claims: int
    terms: int

    @property
    def avgdl(self) -> float:
        """FTS5's average document length (1.0 for an empty collection, never read then)."""
        return self.terms / self.claims if self.claims and self.terms else 1.0


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
    where = _filters(fleet, everything, narrow)
    lexical, cover = (
        _lexical_lists(where, query, k, n, lambda: collection_stats(fleet, statuses))
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


def collection_stats(fleet: Fleet, statuses: Iterable[str]) -> Stats:
    """N and the collection's terms (BM25's idf and avgdl), counted at most once per
    SIZE_TTL seconds per fleet and statuses in this process. Counting a fleet's rows costs
    1.5–7 ms at 10k claims here (fat rows; more before autovacuum) and grows with the
    fleet; N moving by a few claims barely moves idf or avgdl, and the bridge's lag the
    same way, by the age of its snapshot. The terms' document frequencies are not cached:
    each search counts them (claims.lexicon says why)."""
    key = (fleet.pk, tuple(sorted(statuses)))
    now = time.monotonic()
    hit = _sizes.get(key)
    if hit is not None and now - hit[0] < SIZE_TTL:
        return hit[1]
    if len(_sizes) >= 1024:
        _sizes.clear()
    counted = collection(fleet, statuses).aggregate(n=Count("pk"), terms=Sum("lexical_length"))
    stats = Stats(claims=counted["n"], terms=counted["terms"] or 0)
    _sizes[key] = (now, stats)
    return stats


def collection_size(fleet: Fleet, statuses: Iterable[str]) -> int:
    """idf's N (collection_stats, cached as it is)."""
    return collection_stats(fleet, statuses).claims


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


@dataclass(frozen=True)
class _Filters:
    """The collection's and the narrowing's WHERE clauses over `claims_claim`, compiled;
    and the candidate rows the statements read along the way (`_COLUMNS`, by id), so no
    statement has to read them again."""

    collection: tuple[str, list[Any]]
    narrow: tuple[str, list[Any]]  # ("", []) when nothing narrows
    fleet_id: int = 0  # the collection's fleet: where the lexical statements look terms up
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


def _filters(fleet: Fleet, everything: ClaimQuerySet, narrow: Q) -> _Filters:
    narrowed = _where(Claim.objects.filter(narrow)) if narrow else ("", [])
    return _Filters(_where(everything), narrowed, fleet.pk)


def _fetch(sql: str, params: Sequence[Any] | dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cast("list[tuple[Any, ...]]", cur.fetchall())


def _lexical(
    fleet: Fleet, everything: ClaimQuerySet, narrow: Q, query: str, k: int, n: int,
    stats: Callable[[], Stats],
) -> tuple[list[int], dict[int, float]]:
    """Conjunctive first; any-term when that found fewer than k, both by BM25. Returns the
    ids and, for the any-term tail, each hit's query coverage (ranking.coverage, document
    frequencies counted over `everything`); conjunctive hits cover the whole query."""
    return _lexical_lists(_filters(fleet, everything, narrow), query, k, n, stats)


def _anyterm(
    fleet: Fleet, everything: ClaimQuerySet, narrow: Q, query: str, n: int,
    stats: Callable[[], Stats],
) -> list[tuple[int, list[int]]]:
    """The any-term BM25 list alone (no conjunctive pass): plain RRF's lexical list in
    bench/search_eval.py, as the bridge's `_bm25` over the OR of the terms is."""
    where = _filters(fleet, everything, narrow)
    phrases = bm25.phrases(ranking.query_terms(query))
    return _bm25(where, phrases, _phrase_hits(where, phrases), n, stats, tail=True)[1]


def _lexical_lists(
    where: _Filters, query: str, k: int, n: int, stats: Callable[[], Stats]
) -> tuple[list[int], dict[int, float]]:
    terms = ranking.query_terms(query)
    if not terms:
        return [], {}
    phrases = bm25.phrases(terms)
    # One statement ranks both passes: the any-term list comes along unless there is no
    # tail to take it for (one term), and costs one more sort of rows already scored.
    found, anyterm, df = _bm25(where, phrases, _phrase_hits(where, phrases), n, stats,
                               tail=len(terms) > 1)
    if len(found) >= k or len(terms) == 1:
        return [pk for pk, _ in found], {}
    seen = {pk for pk, _ in found}
    tail = [row for row in anyterm if row[0] not in seen][: n - len(found)]
    if not tail:
        return [pk for pk, _ in found], {}
    by_term = {terms[i]: count for i, count in df.items()}
    total = stats().claims
    covered = ranking.coverage_of(terms, by_term, total)
    cover = {pk: covered({terms[i] for i in matched}) for pk, matched in tail}
    return [pk for pk, _ in found] + [pk for pk, _ in tail], cover


# One statement per pass. The phrases' doclists come from ClaimTerm's covering index
# (single-token phrases) or from `_phrase_hits` (the rest), as (claim, phrase, f, |d|,
# number) rows; document frequencies count them over the whole collection, the score sums
# over each claim's rows, phrase by phrase in query order, in float8 — the very
# operations, in the very order, of FTS5's bm25 (mcp_bridge.contract.bm25), so equal
# inputs give equal scores, bit for bit, on both sides. Equal scores break by number (the
# snapshot's rowid order, which the bridge breaks them by).
#
# Only the term rows are read to count and score: they carry their claim's status, number
# and length (claims.lexicon.COPIES), so the collection is a condition on the index's own
# columns. Joining each match to its claim, as the first version did, cost one claim
# lookup per match (2,128 for "flaky test retries" at 10k claims, ~6,400 buffers; with
# the parallel workers Postgres started for it, ~3/4 of the statement's time). The
# narrowing (validity, filters) is a property of the claim, so it is checked while the
# best-scored claims are taken in order: a nested loop under LIMIT stops at n kept.
def _f8(x: float) -> str:
    return f"{x!r}::float8"


_W_TEXT, _W_SUBJECT = (_f8(w) for w in bm25.WEIGHTS)
_RATIO = "((%(n)s - df.df + 0.5::float8) / (df.df + 0.5::float8))"
_IDF = f"(CASE WHEN {_RATIO} > 1 THEN ln({_RATIO}) ELSE {_f8(bm25.IDF_FLOOR)} END)"
_SATURATION = (
    f"((f.f * {_f8(bm25.K1 + 1.0)}) / (f.f + {_f8(bm25.K1)} * ({_f8(1 - bm25.B)} "
    f"+ {_f8(bm25.B)} * f.len::float8 / %(avgdl)s)))"
)
_TERMS = ClaimTerm._meta.db_table
_BM25 = f"""
WITH q AS (SELECT term, i - 1 AS i FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)),
found AS (
    SELECT t.claim_id, q.i, t.text_count * {_W_TEXT} + t.subject_count * {_W_SUBJECT} AS f,
           t.length AS len, t.number
    FROM q JOIN {_TERMS} t ON t.fleet_id = %(fleet)s AND t.term = q.term
    WHERE %(collection)s
    UNION ALL
    SELECT * FROM unnest(%(pc)s::bigint[], %(pi)s::bigint[], %(pf)s::float8[],
                         %(pl)s::bigint[], %(pn)s::bigint[])
),
df AS (SELECT i, count(*)::float8 AS df FROM found GROUP BY i),
scored AS (
    SELECT f.claim_id, min(f.number) AS claim_number, array_agg(f.i ORDER BY f.i) AS matched,
           sum({_IDF} * {_SATURATION} ORDER BY f.i) AS score
    FROM found f JOIN df USING (i) GROUP BY f.claim_id
),
chosen AS (
    (SELECT s.*, TRUE AS every
     FROM (SELECT * FROM scored WHERE cardinality(matched) = %(m)s
           ORDER BY score DESC, claim_number ASC) s
     JOIN {_TABLE} ON {_TABLE}.id = s.claim_id WHERE %(narrow)s
     ORDER BY s.score DESC, s.claim_number ASC LIMIT %(limit)s)
    UNION ALL
    (SELECT s.*, FALSE
     FROM (SELECT * FROM scored ORDER BY score DESC, claim_number ASC) s
     JOIN {_TABLE} ON {_TABLE}.id = s.claim_id WHERE %(narrow)s
     ORDER BY s.score DESC, s.claim_number ASC LIMIT %(tail)s)
)
SELECT s.every, s.matched, (SELECT array_agg(i ORDER BY i) FROM df),
       (SELECT array_agg(df ORDER BY i) FROM df), {{select}}
FROM chosen s JOIN {_TABLE} ON {_TABLE}.id = s.claim_id
ORDER BY s.every DESC, s.score DESC, s.claim_number ASC
"""
_COLUMN = re.compile(r'"([a-z_]+)"\."([a-z_]+)"')


def _on_terms(sql: str) -> str:
    """The collection's WHERE clause (over claims_claim) as a condition on the term rows
    `t`, which copy the columns it may name (claims.lexicon.COPIES, plus fleet_id)."""
    copied = {"fleet_id", *lexicon.COPIES.values()}
    for table, column in _COLUMN.findall(sql):
        if table != _TABLE or column not in copied:
            # a programming error: a new collection filter needs its column copied too
            raise ValueError(f"the collection filters on {table}.{column}, not on term rows")
    renamed = {theirs: mine for mine, theirs in lexicon.COPIES.items()}
    return _COLUMN.sub(lambda m: f't."{renamed.get(m[2], m[2])}"', sql)


Ranked = list[tuple[int, list[int]]]  # claim ids, best first, each with its phrases


def _bm25(
    where: _Filters,
    phrases: Sequence[tuple[str, ...]],
    extra: Sequence[tuple[int, int, float, int, int]],
    n: int,
    stats: Callable[[], Stats],
    *,
    tail: bool,
) -> tuple[Ranked, Ranked, dict[int, int]]:
    """By BM25, the top n claims `where` keeps that match every phrase, and (`tail`) the
    top n that match any; each id with the phrases it matches (0-based indexes); and each
    phrase's document frequency over the collection (phrases nothing matches are absent).
    An empty phrase matches no row, as FTS5 reads `"__"`."""
    single = [p[0] if len(p) == 1 else None for p in phrases]
    if not any(single) and not extra:
        return [], [], {}
    st = stats()
    collection_sql, params = _named(*where.collection, "c")
    narrow_sql, narrow_params = _named(*where.narrow, "w") if where.narrow[0] else ("TRUE", {})
    sql = (_BM25.replace("{select}", _SELECT).replace("%(collection)s", _on_terms(collection_sql))
           .replace("%(narrow)s", narrow_sql))
    rows = _fetch(sql, {
        **params, **narrow_params, "terms": single, "fleet": where.fleet_id,
        **{key: [e[j] for e in extra] for j, key in enumerate(("pc", "pi", "pf", "pl", "pn"))},
        "n": float(st.claims), "avgdl": st.avgdl, "m": len(phrases), "limit": n,
        "tail": n if tail else 0,
    })
    where.rows.update((row[4], _Row(row[4:])) for row in rows)
    df = {int(i): int(c) for i, c in zip(rows[0][2], rows[0][3], strict=True)} if rows else {}
    every = [(row[4], [int(i) for i in row[1]]) for row in rows if row[0]]
    anyterm = [(row[4], [int(i) for i in row[1]]) for row in rows if not row[0]]
    return every, anyterm, df


def _named(sql: str, params: Sequence[Any], prefix: str) -> tuple[str, dict[str, Any]]:
    """A compiled clause's positional placeholders as named ones (`%(c0)s`, …), so it can
    sit in a statement whose other parameters are named."""
    parts = sql.split("%s")
    if len(parts) != len(params) + 1:
        raise ValueError("placeholder count does not match the parameters")  # a bug here
    names = [f"{prefix}{j}" for j in range(len(params))]
    text = parts[0] + "".join(f"%({name})s{part}" for name, part in zip(names, parts[1:],
                                                                           strict=True))
    return text, dict(zip(names, params, strict=True))


def _phrase_hits(
    where: _Filters, phrases: Sequence[tuple[str, ...]]
) -> list[tuple[int, int, float, int, int]]:
    """(claim id, phrase index, f, |d|, number) of each multi-token phrase ("cache_bust":
    `cach bust`) over the collection: the claims holding all its tokens, re-cut by the one
    tokenizer to count where they stand next to each other in one column. Rare in queries
    (\\w+ terms that FTS5 splits: underscores, combining marks), so cut at query time, not
    stored."""
    out: list[tuple[int, int, float, int, int]] = []
    for i, phrase in enumerate(phrases):
        if len(phrase) < 2:
            continue
        tokens = sorted(set(phrase))
        sql, params = where.collection
        rows = _fetch(
            f"SELECT id, text, subject, lexical_length, number FROM {_TABLE} "
            f"WHERE {sql} AND id IN (SELECT claim_id "
            f"FROM {ClaimTerm._meta.db_table} WHERE fleet_id = %s AND term = ANY(%s) "
            "GROUP BY claim_id HAVING count(*) = %s)",
            [*params, where.fleet_id, tokens, len(tokens)],
        )
        cut = bm25.tokens((text, subject) for _, text, subject, _, _ in rows)
        for (pk, _, _, length, number), doc in zip(rows, cut, strict=True):
            f = bm25.weighted(doc.phrase_counts(phrase))
            if f:
                out.append((pk, i, f, length, number))
    return out


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
