"""Each claim's terms as the bridge's FTS5 index holds them: the server's BM25 statistics.

The bridge ranks with SQLite FTS5's bm25() over the snapshot; the server computes the same
formula in SQL (claims/search.py) over rows kept here, written in the claim's own
transaction (a claim and its terms never disagree, and no signal can be skipped):

- ClaimTerm: per claim and term, its count in the text and in the subject (BM25's f);
- Claim.lexical_length: the claim's terms over both (BM25's |d|);
- on each ClaimTerm row, copies of its claim's status, number and length (COPIES), so a
  search reads a term's doclist and nothing else: a Postgres trigger keeps them equal to
  the claim's when any update changes the claim (status changes have many writers).

The collection-wide figures, N, the terms' document frequencies and the average length,
are counted from these rows at query time over the collection being searched, exactly as
FTS5 counts them over the snapshot's rows. Per-fleet counters kept at write time would put
every claim write of a fleet on the same few hot rows (common terms), in an order that can
deadlock two writes, and would have to follow every status change; counted, they cannot
drift. docs/search.md has the measurements.

Who calls what: Claim.save and ClaimQuerySet.bulk_create call `cut` then `write_terms`;
moderation.edit_claim and redact_claim, which change text with update(), call
`index_claims`; the `index_claims` command (and migration 0009) rebuild them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.db import connection, models, transaction

from claims.models import ClaimTerm
from fleet import column_update, copy_insert
from mcp_bridge.contract import bm25

assert bm25.COLUMNS == ("text", "subject"), "ClaimTerm has one count per FTS5 column"

BATCH = 500  # claims tokenized and written per statement batch by `rebuild`
# A write of this many term rows (an import, a benchmark's load, a large backfill batch)
# analyzes ClaimTerm at once: planned without statistics (a new table; autovacuum's analyze
# comes a minute or more later), one SciFact search ran 20 minutes instead of 50 ms.
ANALYZE_ROWS = 20_000
# ClaimTerm's copies of its claim's columns (term column: claim column). The trigger
# `claims_term_follows_claim` (migration 0011) keeps them equal when a claim row changes;
# a test checks that it copies exactly these.
COPIES = {"status": "status", "number": "number", "length": "lexical_length"}


def cut(claims: Sequence[Any]) -> list[bm25.Tokens]:
    """Each claim's terms (mcp_bridge.contract.bm25.tokens of its text and subject), its
    lexical_length set to match (saved by the caller's insert or update)."""
    found = bm25.tokens((c.text, c.subject) for c in claims)
    for claim, tokens in zip(claims, found, strict=True):
        claim.lexical_length = tokens.length
    return found


def write_terms(pairs: Sequence[tuple[Any, bm25.Tokens]], *,
                term_model: type[models.Model] = ClaimTerm, new: bool = False) -> int:
    """Replace the ClaimTerm rows of saved claims with these terms; returns rows written.
    `new`: the claims were inserted in this transaction, so they have no rows to replace
    (a proposal's write is one DELETE statement shorter). `term_model` is the migration's
    historical model when a migration calls."""
    if not pairs:
        return 0
    manager: Any = term_model._default_manager
    # Migration 0009's historical model predates the claim's copied columns (0011).
    copies = COPIES if any(f.name == "status" for f in term_model._meta.fields) else {}
    # fleet.copy_insert (COPY for many rows), not bulk_create: a drain batch writes tens of
    # thousands of rows, and a model instance per row was most of the proposals' apply
    # time (bench/pipeline_bench.py profile: 35k instances, 1.8 of 4.7 s).
    rows = [
        (c.pk, c.fleet_id, term, in_text, in_subject,
         *(getattr(c, theirs) for theirs in copies.values()))
        for c, tokens in pairs
        for term, (in_text, in_subject) in tokens.frequencies().items()
    ]
    columns = ["claim_id", "fleet_id", "term", "text_count", "subject_count", *copies]
    with transaction.atomic(savepoint=False):
        if not new:
            manager.filter(claim_id__in=[c.pk for c, _ in pairs]).delete()
        copy_insert.insert_rows(term_model._meta.db_table, columns, rows)
        if len(rows) >= ANALYZE_ROWS:
            with connection.cursor() as cur:
                cur.execute(f"ANALYZE {connection.ops.quote_name(term_model._meta.db_table)}")
    return len(rows)


def index_claims(claims: Sequence[Any], *,
                 term_model: type[models.Model] = ClaimTerm) -> int:
    """(Re)build the terms and lexical_length of saved claims, e.g. after an update() of
    their text; returns the term rows written."""
    found = cut(claims)
    with transaction.atomic(savepoint=False):
        column_update.update_columns(claims, ["lexical_length"])
        return write_terms(list(zip(claims, found, strict=True)), term_model=term_model)


def rebuild(claims: Iterable[Any], *, term_model: type[models.Model] = ClaimTerm,
            progress: Callable[[int, int], None] | None = None) -> tuple[int, int]:
    """index_claims over `claims` in batches of BATCH, each its own transaction (a long
    backfill holds no lock for long); `progress(claims, terms)` after each batch.
    Returns (claims, term rows) written."""
    done = rows = 0
    batch: list[Any] = []
    for claim in claims:
        batch.append(claim)
        if len(batch) >= BATCH:
            rows += index_claims(batch, term_model=term_model)
            done, batch = done + len(batch), []
            if progress:
                progress(done, rows)
    if batch:
        rows += index_claims(batch, term_model=term_model)
        done += len(batch)
        if progress:
            progress(done, rows)
    return done, rows
