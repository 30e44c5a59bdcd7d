"""Writing the fleet's activity log: every state change records one row, with its actor.

A bulk writer (the spool drain) may wrap its batch in `deferred()`: rows recorded inside
are inserted together, in order, in one statement when the block ends — still inside the
caller's transaction, so they commit or roll back with the changes they describe.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connection, models
from django.utils import timezone

from fleet.models import Activity, Agent, Fleet

_pending: ContextVar[list[dict[str, Any]] | None] = ContextVar("pending_activity", default=None)


def record(
    fleet: Fleet,
    verb: str,
    *,
    target: models.Model | None = None,
    agent: Agent | None = None,
    user: Any = None,
    **data: Any,
) -> None:
    row = {
        "fleet_id": fleet.pk,
        "verb": verb,
        "agent_id": agent.pk if agent is not None else None,
        "user_id": user.pk if getattr(user, "pk", None) else None,
        "target_type": target._meta.label_lower if target is not None else "",
        "target_id": str(target.pk) if target is not None else "",
        "data": data,
        "at": timezone.now(),
    }
    pending = _pending.get()
    if pending is None:
        Activity.objects.create(**row)
    else:
        pending.append(row)


_INSERT = f"""
    INSERT INTO {Activity._meta.db_table}
        (fleet_id, verb, agent_id, user_id, target_type, target_id, data, at)
    SELECT fleet_id, verb, agent_id, user_id, target_type, target_id, data, at
    FROM jsonb_to_recordset(%s::jsonb) AS r(
        fleet_id bigint, verb text, agent_id bigint, user_id integer, target_type text,
        target_id text, data jsonb, at timestamptz)
"""


@contextmanager
def deferred() -> Iterator[None]:
    """Collect the rows recorded in this block and insert them in one statement at its end.

    The rows travel as one JSON document: for thousands of rows that costs a fraction of
    what building model instances and a multi-row VALUES list costs.
    """
    rows: list[dict[str, Any]] = []
    token = _pending.set(rows)
    try:
        yield
    finally:
        _pending.reset(token)
    if rows:
        with connection.cursor() as cur:
            cur.execute(_INSERT, [json.dumps([{**r, "at": r["at"].isoformat()} for r in rows])])
