"""The record of applied spool events: what makes a drained event apply exactly once.

Fleet owns the AppliedEvent table; the drain (ctxlake_site.drain) asks which of a batch's
ids are recorded already before applying it, and records the new ones with their answers
after, in the batch's transaction — each in one statement whatever the batch's size: a row
per event through the ORM would cost the drain a round trip per event
(bench/pipeline_bench.py measures the batch at ≥ 2,000 events/s).

The unique event id, not the question asked first, is what keeps an event from applying
twice: should another drain record one of the ids in between (the same event arriving
by a spool file and through the inbox at once), `record` raises IntegrityError, the batch
rolls back, and the drain redoes it event by event, skipping what the other applied.
Recording after applying writes each row once; recording before meant an INSERT and then
an UPDATE of every row for its answer.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from django.db import connection

from fleet.models import AppliedEvent, Fleet

_TABLE = connection.ops.quote_name(AppliedEvent._meta.db_table)


def known(ids: Collection[str]) -> set[str]:
    """The ids among `ids` recorded as applied already (to any fleet, from any source)."""
    if not ids:
        return set()
    with connection.cursor() as cur:
        # A join, not `event_id = ANY(%s)`: with statistics that lag the table (vacuumed
        # empty, then filled by the drain) Postgres scanned it comparing each row with
        # every id, 14 ms a batch at 10k rows; the join stays ~2 ms.
        cur.execute(
            f"SELECT a.event_id FROM unnest(%s::uuid[]) AS u(id)"
            f" JOIN {_TABLE} AS a ON a.event_id = u.id",
            [list(ids)],
        )
        return {str(row[0]) for row in cur.fetchall()}


def record(
    fleet: Fleet, applied: Collection[tuple[Mapping[str, Any], Mapping[str, Any]]],
    *, source: str = "spool",
) -> None:
    """Record each (event, its answer) as applied to `fleet`, the answer kept for a replay
    to return. `source` is where the events came from: "spool" (a file) or "api" (the
    inbox). Raises IntegrityError if any id is recorded already."""
    rows = [{"id": e["id"], "kind": e["kind"], "result": r} for e, r in applied]
    if not rows:
        return
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {_TABLE} (event_id, fleet_id, kind, source, applied_at, result)
            SELECT id, %s, kind, %s, now(), result
            FROM jsonb_to_recordset(%s::jsonb) AS e(id uuid, kind text, result jsonb)
            """,
            [fleet.pk, source, json.dumps(rows)],
        )
