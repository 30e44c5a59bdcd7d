"""The record of applied spool events: what makes a drained event apply exactly once.

Fleet owns the AppliedEvent table; the drain (ctxlake_site.drain) records a batch's ids
here before applying it and stores the answers after, each in one statement whatever the
batch's size: a row per event through the ORM would cost the drain a round trip per event
(bench/pipeline_bench.py measures the batch at ≥ 2,000 events/s).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection

from fleet.models import AppliedEvent, Fleet

_TABLE = connection.ops.quote_name(AppliedEvent._meta.db_table)


def record_new(
    fleet: Fleet, events: Iterable[Mapping[str, Any]], *, source: str = "spool"
) -> set[str]:
    """Record each event (its "id" and "kind") as applied to `fleet`; returns the ids that
    were not recorded before — the ones to apply now. A replayed id is left as it was.
    `source` is where the event came from: "spool" (a file) or "api" (the inbox)."""
    rows = [{"id": e["id"], "kind": e["kind"]} for e in events]
    if not rows:
        return set()
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {_TABLE} (event_id, fleet_id, kind, source, applied_at, result)
            SELECT id, %s, kind, %s, now(), '{{}}'::jsonb
            FROM jsonb_to_recordset(%s::jsonb) AS e(id uuid, kind text)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id
            """,
            [fleet.pk, source, json.dumps(rows)],
        )
        return {str(row[0]) for row in cur.fetchall()}


def store_results(results: Mapping[str, Mapping[str, Any]]) -> None:
    """Keep each applied event's answer (event id → result) for a replay to return."""
    if not results:
        return
    with connection.cursor() as cur:
        cur.execute(
            f"""
            UPDATE {_TABLE} AS a SET result = r.value
            FROM jsonb_each(%s::jsonb) AS r(key, value)
            WHERE a.event_id = r.key::uuid
            """,
            [json.dumps(results)],
        )
