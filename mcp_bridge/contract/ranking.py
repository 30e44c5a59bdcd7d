"""How a claim's search score is computed: the one definition both search paths share.

Stdlib only and pure, so the server's claims/search.py imports these very constants and
functions and both sides rank the same data the same way:

    score = LEXICAL_WEIGHT · w(lexical hit) · rrf(lexical_rank)     # weighted RRF
            + VECTOR_WEIGHT · rrf(vector_rank)
            × confidence × recency(age_days) × (1 − staleness)

with rrf(rank) = 1 / (RRF_K + rank), rank 1-based, and a missing rank contributing 0.

The lexical list is conjunctive first: claims matching every query term (stopwords
dropped, as Postgres' websearch_to_tsquery does), by BM25; only when that finds fewer than
k does a disjunctive (any-term) BM25 pass append more. It is what the server's websearch
AND semantics return, and it keeps the bridge from BM25-scoring half the snapshot for a
query of common words.

The fusion is the simplest candidate not significantly worse than the best, held out:
bench/search_eval.py --cv compares plain RRF, RRF k=60 of these lists, a lexical weight
alone, a lexical weight and k, and all three constants tuned, by 5-fold cross-validation
over people's queries (SciFact, LoCoMo) and the project's, with paired bootstrap
intervals (docs/search.md). Two constants are tuned, RRF_K and LEXICAL_WEIGHT, on coarse
grids; COVERAGE_POWER stays at 1 (linear), untuned: tuning it as well was significantly
worse held out on SciFact, and every simpler candidate significantly worse on SciFact.

A lexical hit's weight w is how much of the query it covers: coverage^COVERAGE_POWER,
where coverage is the idf-weighted fraction of the query's terms the claim matches (1 for
the conjunctive hits, which match them all). An any-term hit sharing one common word with
a paraphrase ("tests") weighs next to nothing; one sharing the query's rare words
(`RUSTFLAGS`, "checkout") keeps most of its vote. Both sides count document frequencies
over the same collection: the fleet's claims of the searched statuses, superseded and
expired included, filters ignored (what snapshot.sqlite holds; Lucene's idf ignores
filters the same way).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mcp_bridge.contract.globs import (
    WILDCARDS,
    BadPath,
    covers,
    holds,
    literal_segments,
    normalise,
    segments,
)

RRF_K = 5  # tuned: 5-fold CV over people's queries and the project's (search_eval.py --cv)
COVERAGE_POWER = 1.0  # not tuned: linear; tuning it too overfit (worse held out on SciFact)
LEXICAL_WEIGHT = 2.0  # tuned: RRF weight of the lexical list; the same CV
VECTOR_WEIGHT = 1.0  # RRF weight of the vector list
CANDIDATES = 100  # rows each of the lexical and vector lists contributes to the fusion
MIN_COSINE = 0.2  # below this a vector "match" is noise for all-MiniLM-L6-v2
VECTOR_MARGIN = 1.0  # keep vector candidates this close to the best cosine (1.0: off)
RECENCY_HALF_LIFE_DAYS = 180.0
RECENCY_FLOOR = 0.5  # an old claim loses at most half its score to age
MIN_CONFIDENCE = 0.05  # a zero-confidence claim still sorts, last
STALE_DEFAULT = 0.5  # staleness of a claim flagged stale without a finer estimate


MAX_QUERY_TERMS = 32
_STOPWORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers him his how i if in into is it its itself just me more
most my no nor not now of off on once only or other our ours out over own same she should so
some such than that the their them then there these they this those through to too under
until up very was we were what when where which while who whom why will with would you your
yours yourself yourselves myself ourselves himself herself themselves theirs don s t
"""
STOPWORDS = frozenset(_STOPWORDS.split())
_TERM = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """Lower-cased distinct word terms, stopwords dropped (unless nothing else is left)."""
    terms = list(dict.fromkeys(t.lower() for t in _TERM.findall(query)))
    content = [t for t in terms if t not in STOPWORDS]
    return (content or terms)[:MAX_QUERY_TERMS]


@dataclass(frozen=True)
class Factors:
    confidence: float
    age_days: float
    staleness: float


def depth(k: int) -> int:
    """Rows each candidate list contributes: CANDIDATES, or k + 1 when more are asked for
    (so k results and an honest `truncated` are possible on both sides)."""
    return max(CANDIDATES, k + 1)


def cosine_floor(best: float) -> float:
    """The least cosine a vector candidate needs, given the best one's."""
    return max(MIN_COSINE, best - VECTOR_MARGIN)


def rrf(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / (RRF_K + rank)


def idf(df: int, n: int) -> float:
    """BM25's inverse document frequency (as FTS5 computes it): > 0, larger for rarer terms."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def coverage(
    terms: Sequence[str], matched: Collection[str], df: Mapping[str, int], n: int
) -> float:
    """The idf-weighted fraction of the query's terms a claim matches, in [0, 1].

    `df[t]`: how many of the collection's `n` claims match term t. A term no claim
    matches still counts in the whole (it is part of what was asked), so a query half
    made of words the memory never uses cannot get a confident lexical vote.
    """
    return coverage_of(terms, df, n)(matched)


def coverage_of(
    terms: Sequence[str], df: Mapping[str, int], n: int
) -> Callable[[Collection[str]], float]:
    """`coverage` of one query for any set of matched terms, its term weights computed
    once: a query's candidates differ only in the terms they match (a search scores up to
    CANDIDATES of them)."""
    weights = {t: idf(df.get(t, 0), n) for t in terms}
    total = sum(weights.values())

    def of(matched: Collection[str]) -> float:
        return sum(w for t, w in weights.items() if t in matched) / total if total else 0.0

    return of


def lexical_weight(cov: float) -> float:
    """A lexical hit's RRF weight given its coverage (1.0 for a conjunctive hit)."""
    share: float = min(1.0, max(0.0, cov)) ** COVERAGE_POWER  # float ** float is Any to mypy
    return LEXICAL_WEIGHT * share


def recency(age_days: float) -> float:
    age = max(0.0, age_days)
    decay: float = 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)  # float ** float is Any to mypy
    return RECENCY_FLOOR + (1.0 - RECENCY_FLOOR) * decay


def score(
    lexical_rank: int | None,
    vector_rank: int | None,
    f: Factors,
    *,
    lexical_weight: float | None = None,
) -> float:
    weight = LEXICAL_WEIGHT if lexical_weight is None else lexical_weight
    fused = weight * rrf(lexical_rank) + VECTOR_WEIGHT * rrf(vector_rank)
    confidence = min(1.0, max(MIN_CONFIDENCE, f.confidence))
    freshness = 1.0 - min(1.0, max(0.0, f.staleness))
    return fused * confidence * recency(f.age_days) * freshness


def fuse(
    lexical: Sequence[str],
    vector: Sequence[str],
    factors: Mapping[str, Factors],
    *,
    coverage: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse two ranked id lists into (id, score), best first; ties break by id.

    `coverage`: per lexical id, the share of the query it covers (ranking.coverage); ids
    missing from it (the conjunctive hits) cover it all. A lexical vote weighs
    lexical_weight(coverage).
    """
    lex = {cid: i + 1 for i, cid in enumerate(lexical)}
    vec = {cid: i + 1 for i, cid in enumerate(vector)}
    cov = coverage or {}
    ids: Iterable[str] = dict.fromkeys([*lexical, *vector])
    scored = [
        (
            cid,
            score(
                lex.get(cid),
                vec.get(cid),
                factors[cid],
                lexical_weight=lexical_weight(cov.get(cid, 1.0)),
            ),
        )
        for cid in ids
    ]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


# -- path-scoped recall -------------------------------------------------------------------
#
# An agent claiming `src/payments/**` should see the payment gotchas without asking. A
# claim is related to a lease pattern when one of its cited paths is covered by the
# pattern (or is a directory the pattern lies in), or when its subject is such a path, or
# is one word naming a non-generic directory of the pattern ("payments"). Which paths a
# lease pattern covers is mcp_bridge.contract.globs.covers, the server's rule too.

PATH_RECALL_K = 3  # claims a fleet_claim result carries
PATH_WEIGHT = 1.0  # a cited path matches: the claim was observed in those files
SUBJECT_WEIGHT = 0.8  # only the subject matches: about the area, maybe not these files
GENERIC_SEGMENTS = frozenset(
    [
        "src",
        "lib",
        "libs",
        "app",
        "apps",
        "pkg",
        "pkgs",
        "internal",
        "cmd",
        "packages",
        "source",
        "sources",
        "code",
        "main",
    ]
)


def path_related(pattern: str, path: str) -> bool:
    """Covered by the pattern, or a directory that holds everything the pattern names."""
    return covers(pattern, path) or holds(path, pattern)


def subject_related(pattern: str, subject: str) -> bool:
    return PathMatcher([pattern]).subject_hit(subject)


class PathMatcher:
    """path_match for one set of patterns, asked about many claims.

    Each pattern is cut once, not once per claim, into sets a cited path is looked up in:
    a render's briefing with 1,000 live leases over 1,000 claims asked path_related about
    every (lease, cited path) pair, near a million a render (bench/fleet_scale.py's
    profile put nearly all of a lease change's render there). The answers are
    path_related's, which stays the one definition (test_recall checks the two agree):
    the literal reading of `covers` is a prefix lookup, `holds` a lookup among the
    patterns' literal prefixes, and only patterns with wildcards are matched one by one.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(dict.fromkeys(patterns))
        cut = [(p, parts) for p in self.patterns if (parts := _parts(p)) is not None]
        # covers' literal reading: the path is a pattern's segments, or lies beneath them
        self._literal = frozenset(parts for _, parts in cut)
        self._globbed = tuple(p for p, parts in cut if any(WILDCARDS & set(s) for s in parts))
        # holds: the cited directory is one of a pattern's leading literal segment runs
        leads = [literal_segments("/".join(parts)) for _, parts in cut]
        self._holders = frozenset(lead[:n] for lead in leads for n in range(1, len(lead) + 1))
        # a word subject relates to a pattern that names it among its literal segments
        self.names = frozenset(seg.lower().split(".")[0]
                               for p in self.patterns for seg in literal_segments(p))

    def related(self, path: str) -> bool:
        """Whether path_related(p, path) holds for any of the patterns."""
        parts = _parts(path)
        if parts is None:
            return False
        if parts in self._holders:
            return True
        if any(parts[:n] in self._literal for n in range(1, len(parts) + 1)):
            return True
        return any(covers(p, path) for p in self._globbed)

    def subject_hit(self, subject: str) -> bool:
        """Whether the claim's subject relates to any of the patterns."""
        if "/" in subject:
            return self.related(subject)
        word = subject.strip().lower()
        return bool(word) and word not in GENERIC_SEGMENTS and word in self.names

    def __call__(self, subject: str, paths: Sequence[str]) -> float:
        """PATH_WEIGHT, SUBJECT_WEIGHT or 0.0: how a claim relates to the patterns."""
        if any(self.related(cited) for cited in paths):
            return PATH_WEIGHT
        return SUBJECT_WEIGHT if self.subject_hit(subject) else 0.0


def _parts(path: str) -> tuple[str, ...] | None:
    """A path's canonical segments, None when it names nothing (BadPath): what covers and
    holds compare."""
    try:
        return segments(normalise(path))
    except BadPath:
        return None


def path_match(patterns: Sequence[str], subject: str, paths: Sequence[str]) -> float:
    """PATH_WEIGHT, SUBJECT_WEIGHT or 0.0: how a claim relates to the patterns claimed."""
    return PathMatcher(patterns)(subject, paths)


def path_score(weight: float, f: Factors) -> float:
    """Path-scoped order: the match weight in place of the fused rank, same factors."""
    confidence = min(1.0, max(MIN_CONFIDENCE, f.confidence))
    freshness = 1.0 - min(1.0, max(0.0, f.staleness))
    return weight * confidence * recency(f.age_days) * freshness
