"""Lexical ranking, as SQLite FTS5 does it: the one tokenizer and the BM25 constants.

The bridge ranks with FTS5's own `bm25()` over `claims_fts`; the server (claims/search.py)
computes the same formula in SQL over per-claim term rows (claims.models.ClaimTerm).
Both sides must cut text into the same terms, so there is one tokenizer, and it is FTS5's
itself: `tokens()` runs the snapshot's tokenizer (TOKENIZE) in an in-memory SQLite and reads
the terms back through `fts5vocab`. A Python port of the porter stemmer and unicode61 would
be a second definition that drifts on some corner (diacritics, underscores, long tokens);
this cannot. Stdlib only (sqlite3), so the server imports it.

FTS5's bm25 (sqlite/ext/fts5/fts5_aux.c), for a query of phrases p and a row d:

    score(d) = Σ_p idf(p) · f(p,d)·(K1 + 1) / (f(p,d) + K1·(1 − B + B·|d| / avgdl))
    idf(p)   = ln((N − n(p) + 0.5) / (n(p) + 0.5)), IDF_FLOOR when that is ≤ 0
    f(p,d)   = Σ over the phrase's instances in d of its column's weight (WEIGHTS)
    |d|      = d's tokens over all columns; avgdl = all rows' tokens / N

N and n(p) count every row of the table (the snapshot: the fleet's promoted claims,
superseded and expired included). A query term is a phrase: "cache_bust" is the two
tokens `cach bust`, next to each other in one column.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # sqlite3 loads on first use: a bridge imports nothing heavy before its
    import sqlite3  # first frame (test_isolation.py)

TOKENIZE = "porter unicode61 remove_diacritics 2"  # the snapshot's claims_fts tokenizer
COLUMNS = ("text", "subject")  # claims_fts's columns, in order
WEIGHTS = (1.0, 0.5)  # bm25() column weights: the text weighs twice the subject
K1 = 1.2  # fixed in FTS5's bm25 (fts5_aux.c); restated for the server's SQL
B = 0.75
IDF_FLOOR = 1e-6  # FTS5's idf for a term in half the rows or more
#: The server stores terms at most this long (a btree index entry must stay small); a
#: query token is cut the same way, so only two > 200-character tokens sharing their
#: first 200 characters could match on the server and not on the bridge.
MAX_TERM_CHARS = 200

#: bm25() as the bridge calls it, built from WEIGHTS.
SQL_BM25 = "bm25(claims_fts, " + ", ".join(f"{w:g}" for w in WEIGHTS) + ")"

_local = threading.local()


class Tokens(NamedTuple):
    """One document cut into terms: per column (COLUMNS order), its terms in order.

    A NamedTuple, not a dataclass: the contract package imports this module, and the
    PreToolUse hook imports the package; `dataclasses` (with `inspect`) costs ~10 ms there.
    """

    columns: tuple[tuple[str, ...], ...]

    @property
    def length(self) -> int:
        """|d| for bm25: tokens over all columns."""
        return sum(len(c) for c in self.columns)

    def frequencies(self) -> dict[str, tuple[int, ...]]:
        """term → its count in each column."""
        out: dict[str, list[int]] = {}
        for i, column in enumerate(self.columns):
            for term in column:
                out.setdefault(term, [0] * len(self.columns))[i] += 1
        return {t: tuple(c) for t, c in out.items()}

    def phrase_counts(self, phrase: Sequence[str]) -> tuple[int, ...]:
        """Instances of `phrase` (consecutive tokens, within one column) in each column;
        overlapping instances count, as FTS5's do."""
        m = len(phrase)
        if not m:
            return (0,) * len(self.columns)
        want = tuple(phrase)
        return tuple(
            sum(1 for i in range(len(c) - m + 1) if c[i : i + m] == want) for c in self.columns
        )


def _db() -> sqlite3.Connection:
    """This thread's scratch database: an FTS5 table with the snapshot's tokenizer."""
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None:
        import sqlite3

        db = sqlite3.connect(":memory:")
        columns = ", ".join(COLUMNS)
        db.execute(f"CREATE VIRTUAL TABLE scratch USING fts5({columns}, tokenize='{TOKENIZE}')")
        db.execute("CREATE VIRTUAL TABLE scratch_terms USING fts5vocab(scratch, 'instance')")
        _local.db = db
    return db


def tokens(docs: Iterable[Sequence[str]]) -> list[Tokens]:
    """Each document's terms as FTS5 indexes them; a document is one string per column."""
    rows = [tuple(doc) for doc in docs]
    if not rows:
        return []
    db = _db()
    marks = ", ".join("?" * len(COLUMNS))
    index = {name: i for i, name in enumerate(COLUMNS)}
    found: list[list[list[str]]] = [[[] for _ in COLUMNS] for _ in rows]
    with db:  # one transaction: the scratch table is empty again when it ends
        db.executemany(
            f"INSERT INTO scratch (rowid, {', '.join(COLUMNS)}) VALUES (?, {marks})",
            ((i, *row) for i, row in enumerate(rows)),
        )
        for term, doc, col, _ in db.execute(
            "SELECT term, doc, col, offset FROM scratch_terms ORDER BY doc, col, offset"
        ):
            found[doc][index[col]].append(term[:MAX_TERM_CHARS])
        db.execute("DELETE FROM scratch")
    return [Tokens(tuple(tuple(c) for c in doc)) for doc in found]


def phrases(terms: Sequence[str]) -> list[tuple[str, ...]]:
    """Each query term as the phrase FTS5 reads from `"term"`: its tokens, in order
    (empty when the term has none: such a phrase matches no row)."""
    cut = tokens([(t, *([""] * (len(COLUMNS) - 1))) for t in terms])
    return [doc.columns[0] for doc in cut]


def weighted(counts: Sequence[int]) -> float:
    """f(p,d): a phrase's per-column counts, weighted as bm25() weighs them."""
    return sum(w * c for w, c in zip(WEIGHTS, counts, strict=True))


def idf(df: int, n: int) -> float:
    """FTS5's idf of a phrase in `df` of `n` rows."""
    ratio = (n - df + 0.5) / (df + 0.5)
    return math.log(ratio) if ratio > 1.0 else IDF_FLOOR  # log ≤ 0 exactly when ratio ≤ 1


def score(freqs: Sequence[float], dfs: Sequence[int], length: int, n: int,
          avgdl: float) -> float:
    """A row's bm25 (positive: larger is better; FTS5 returns it negated), summed over
    the query's phrases in order, as FTS5 sums it."""
    total = 0.0
    for f, df in zip(freqs, dfs, strict=True):
        total += idf(df, n) * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * length / avgdl)))
    return total
