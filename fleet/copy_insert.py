"""Large bulk inserts through Postgres' COPY instead of one multi-row INSERT.

A drain batch inserts hundreds of claims, evidence rows, events and handoffs at a time.
Django's `bulk_create` builds one INSERT with a placeholder per value, compiles every
value through the ORM's insert compiler, and psycopg (binding on the client) then splits
that query text and quotes each value into it, in Python. For 2,500 claims in batches of
125 that took 540–730 ms of CPU on this machine; the same rows through COPY, with their
ids drawn from the table's sequence first, 205–284 ms (2026-12-05, load ≤ 1). The whole
drain of bench/pipeline_bench.py's 10k mixed events, this code and the code before it in
turn, eight runs each: CPU median 2.58 → 2.32 s, wall 4.21 → 3.93 s (the run-to-run spread
on this machine is ±20 %). `insert_rows` is the same for rows that are not models (the
claims' term rows).

`CopyInsertQuerySet.bulk_create` takes the COPY path only where it gives the same result
as Django's: at least COPY_MIN_ROWS new rows (a small batch pays one more round trip for
its ids and gains nothing), no conflict handling asked, a sequence-backed id this role may
draw from (see DRAW_IDS), and no value that is a database expression (a
`DatabaseDefault`, an F()). Anything else goes to Django's own `bulk_create` unchanged.
Either way the objects come back saved, with their ids; triggers and constraints fire as
for INSERT, and a database error arrives as Django's (IntegrityError …). One difference:
Django's INSERT … RETURNING also sets generated columns on the objects
(Claim.search_vector); after COPY they load on first access, like a deferred field.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar, cast

from django.db import connections, models, transaction
from django.db.backends.utils import CursorDebugWrapper
from django.db.models.fields import AutoFieldMixin

#: Below this many rows Django's one INSERT … RETURNING is as cheap: COPY needs the ids
#: drawn first, one more round trip.
COPY_MIN_ROWS = 32

M = TypeVar("M", bound=models.Model)


class CopyInsertQuerySet(models.QuerySet[M]):
    """A QuerySet whose `bulk_create` copies large plain batches (see the module)."""

    def bulk_create(self, objs: Iterable[M], batch_size: int | None = None,
                    ignore_conflicts: bool = False, update_conflicts: bool = False,
                    update_fields: Collection[str] | None = None,
                    unique_fields: Collection[str] | None = None) -> list[M]:
        """`batch_size` bounds Django's INSERT statements only: COPY streams the rows, so
        it has no statement to bound. A size ≤ 0 is refused either way, as Django does."""
        if batch_size is not None and batch_size <= 0:
            raise ValueError("Batch size must be a positive integer.")
        objs = list(objs)
        self._for_write = True  # self.db is then the write alias, as in Django's own
        if not (ignore_conflicts or update_conflicts or update_fields or unique_fields) \
                and copyable(self.model, objs, self.db):
            # Django's own step before an insert: related objects' ids onto their columns
            self._prepare_for_bulk_create(objs)  # type: ignore[attr-defined]
            if copy_rows(self.model, objs, self.db):
                return objs
        return super().bulk_create(
            objs, batch_size=batch_size, ignore_conflicts=ignore_conflicts,
            update_conflicts=update_conflicts, update_fields=update_fields,
            unique_fields=unique_fields,
        )


def copyable(model: type[models.Model], objs: Sequence[models.Model], using: str) -> bool:
    """Whether `objs` may go through COPY: enough new rows of a plain table with a
    sequence-backed id. Values are checked as copy_rows prepares them."""
    meta = model._meta
    return (
        len(objs) >= COPY_MIN_ROWS
        and connections[using].vendor == "postgresql"
        and isinstance(meta.pk, AutoFieldMixin)
        and not meta.parents
        and all(obj.pk is None for obj in objs)
    )


#: The ids for a COPY, drawn from the id column's sequence, or no rows at all where this
#: role may not draw from it. An identity column's own default needs no grant on its
#: sequence but an explicit nextval() does: an app role given table grants only, with
#: migrations run by another role, gets no ids here and its rows go through Django's
#: INSERT instead of failing with "permission denied for sequence".
DRAW_IDS = """
WITH s AS (SELECT pg_get_serial_sequence(%s, %s) AS seq)
SELECT nextval(s.seq) FROM s, generate_series(1, %s)
WHERE has_sequence_privilege(s.seq, 'USAGE, UPDATE')
"""


def copy_rows(model: type[models.Model], objs: Sequence[models.Model], using: str) -> bool:
    """Insert unsaved `objs` with COPY, their ids drawn from the table's sequence first.

    False, with nothing written, where Django's INSERT has to do it instead: a value is a
    database expression (COPY sends only data), or this role may not draw the ids.
    """
    meta = model._meta
    connection = connections[using]
    fields = [f for f in meta.concrete_fields if not f.generated and not f.primary_key]
    rows: list[list[Any]] = []
    for obj in objs:
        row: list[Any] = [None]  # the id, drawn below
        for f in fields:
            value = f.pre_save(obj, add=True)
            if hasattr(value, "resolve_expression"):
                return False
            row.append(f.get_db_prep_save(value, connection))
        rows.append(row)
    pk = meta.pk
    assert pk is not None
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cur:
        cur.execute(DRAW_IDS, [connection.ops.quote_name(meta.db_table), pk.column, len(objs)])
        ids = [row[0] for row in cur.fetchall()]
    if len(ids) != len(objs):
        return False
    for row, id_ in zip(rows, ids, strict=True):  # in place: a large import holds one copy
        row[0] = id_
    insert_rows(meta.db_table, [cast(str, f.column) for f in (pk, *fields)], rows, using)
    for obj, id_ in zip(objs, ids, strict=True):
        obj.pk = id_
        obj._state.adding = False
        obj._state.db = using
    return True


def insert_rows(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                using: str = "default") -> None:
    """Insert `rows` (values as psycopg adapts them) into `table`'s `columns`, inside the
    caller's transaction: COPY from COPY_MIN_ROWS rows, else one INSERT (COPY costs a
    second round trip, which a few rows do not earn back). A database error arrives as
    Django's; the COPY is logged as Django logs its statements (`connection.queries`,
    the `django.db.backends` logger), without its rows."""
    connection = connections[using]
    quote = connection.ops.quote_name
    names = f"{quote(table)} ({', '.join(quote(c) for c in columns)})"
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cur:
        if len(rows) < COPY_MIN_ROWS:
            if rows:
                one = f"({', '.join(['%s'] * len(columns))})"
                cur.execute(f"INSERT INTO {names} VALUES {', '.join([one] * len(rows))}",
                            [value for row in rows for value in row])
            return
        sql = f"COPY {names} FROM STDIN"
        logged = cur.debug_sql(sql) if isinstance(cur, CursorDebugWrapper) else nullcontext()
        with logged, connection.wrap_database_errors, cur.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
