"""Keeping a long-lived database fast: statistics, dead rows, and bloated search indexes.

Bulk deletes (a fleet removed, thousands of claims rejected) leave their rows dead until
VACUUM, and leave the HNSW (pgvector) and GIN (full text) indexes at their old size
even after it: HNSW never gives pages back, so after bench fleets were deleted the
vector index stayed 195 MB for 0 live rows and vector search ran at half speed until it
was rebuilt. So:

- `index_report()` measures each HNSW and GIN index of ctxlake's tables against the data
  it indexes now: an index is bloated when it is over BLOAT_FLOOR_BYTES and more than
  BLOAT_FACTOR times what a healthy index takes for that data (HEALTHY_RATIO: index
  bytes per byte of the indexed column's values, measured here).
- `maintain(commit=...)` runs VACUUM (ANALYZE) on ctxlake's tables, then
  REINDEX INDEX CONCURRENTLY on each bloated index (readers and writers carry on).
  `manage.py maintain_db [--commit]` and the daily django-q2 job call it.
- `doctor_status()` is doctor's one-line summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.apps import apps
from django.db import connection

APPS = ("fleet", "claims", "django_q")  # whose tables are vacuumed and watched
# Index bytes per byte of the indexed column (sum of pg_column_size over the rows), for
# a healthy index, measured here: HNSW over 384-dim vectors (m=16) 1.33-1.45, built or
# grown by inserts alike; GIN over search_vector 0.9-2.3 as inserts grow it (api_bench's and
# search_latency's claims; a fresh build packs it tighter, but inserts grow it back, so
# the grown size is the healthy one). Per byte, not per row: GIN's size follows how
# many words the claims hold.
HEALTHY_RATIO = {"hnsw": 1.5, "gin": 2.4}
BLOAT_FACTOR = 2.0
BLOAT_FLOOR_BYTES = 16 << 20  # a smaller index is cheap to scan whatever its state

_WATCHED = """
    SELECT i.relname, t.relname, am.amname, a.attname, pg_relation_size(i.oid)
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_class t ON t.oid = x.indrelid
    JOIN pg_am am ON am.oid = i.relam
    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
    WHERE am.amname IN ('hnsw', 'gin') AND t.relname = ANY(%s)
    ORDER BY i.relname
"""


@dataclass(frozen=True)
class IndexHealth:
    name: str
    table: str
    method: str  # "hnsw" or "gin"
    size: int  # bytes on disk
    rows: int  # rows it indexes now (the column is not null)
    data: int  # bytes of the indexed column's values in those rows

    @property
    def expected(self) -> int:
        """What a healthy index of this data takes, about."""
        return int(self.data * HEALTHY_RATIO[self.method])

    @property
    def bloated(self) -> bool:
        return self.size > BLOAT_FLOOR_BYTES and self.size > BLOAT_FACTOR * self.expected

    def describe(self) -> str:
        return (
            f"{self.name} {mb(self.size)} for {self.rows:,} row(s) "
            f"(healthy ~{mb(self.expected)})"
        )


def mb(size: int) -> str:
    return f"{size / (1 << 20):.1f} MB"


def tables() -> list[str]:
    """ctxlake's tables (and the task queue's): the ones maintenance vacuums."""
    return sorted(
        model._meta.db_table
        for config in apps.get_app_configs()
        if config.label in APPS
        for model in config.get_models()
        if model._meta.managed and not model._meta.proxy
    )


def index_report() -> list[IndexHealth]:
    """Every HNSW and GIN index on ctxlake's tables, with its size, rows and their data."""
    quote = connection.ops.quote_name
    found = []
    with connection.cursor() as cur:
        cur.execute(_WATCHED, [tables()])
        for name, table, method, column, size in cur.fetchall():
            col = quote(column)
            cur.execute(f"SELECT count({col}), sum(pg_column_size({col})) FROM {quote(table)}")
            rows, data = cur.fetchone()
            found.append(IndexHealth(name, table, method, size, rows, int(data or 0)))
    return found


def vacuum(names: list[str] | None = None) -> list[str]:
    """VACUUM (ANALYZE) each table (all of ctxlake's by default); outside any transaction."""
    done = []
    with connection.cursor() as cur:
        for table in names or tables():
            cur.execute(f"VACUUM (ANALYZE) {connection.ops.quote_name(table)}")
            done.append(table)
    return done


def reindex(index: str) -> None:
    """Rebuild one index without blocking reads or writes of its table."""
    with connection.cursor() as cur:
        cur.execute(f"REINDEX INDEX CONCURRENTLY {connection.ops.quote_name(index)}")


def maintain(*, commit: bool, say: Callable[[str], None] = lambda line: None) -> list[str]:
    """Vacuum and analyze ctxlake's tables, then rebuild the bloated search indexes.

    Without `commit`, only says what it would do. Returns the actions (done or planned).
    Must run outside a transaction (VACUUM and REINDEX CONCURRENTLY refuse one).
    """
    actions = []
    for table in tables():
        actions.append(f"VACUUM (ANALYZE) {table}")
        if commit:
            vacuum([table])
        say(("done: " if commit else "would run: ") + actions[-1])
    for health in index_report():
        say(("bloated: " if health.bloated else "ok: ") + health.describe())
        if health.bloated:
            actions.append(f"REINDEX INDEX CONCURRENTLY {health.name}")
            if commit:
                reindex(health.name)
                say(f"done: {actions[-1]}: now {mb(_size(health.name))}")
            else:
                say(f"would run: {actions[-1]}")
    return actions


def _size(index: str) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_relation_size(%s::regclass)", [index])
        return int(cur.fetchone()[0])


def table_sizes(names: list[str]) -> dict[str, tuple[int, int | None]]:
    """{table: (bytes on disk with its indexes and TOAST, estimated rows or None when the
    table was never analyzed)}: the planner's estimate, so doctor never counts a big table."""
    with connection.cursor() as cur:
        cur.execute("SELECT relname, pg_total_relation_size(oid), reltuples::bigint "
                    "FROM pg_class WHERE relkind = 'r' AND relname = ANY(%s)", [names])
        return {name: (int(size), int(rows) if rows >= 0 else None)
                for name, size, rows in cur.fetchall()}


def doctor_status() -> tuple[str, str]:
    """(status, detail) for `manage.py doctor`: "warn" naming each bloated index."""
    report = index_report()
    bloated = [h for h in report if h.bloated]
    if bloated:
        names = "; ".join(h.describe() for h in bloated)
        return "warn", f"bloated: {names}: run manage.py maintain_db --commit"
    total = sum(h.size for h in report)
    return "ok", f"{len(report)} search index(es), {mb(total)}, none bloated"
