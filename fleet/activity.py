"""Writing the fleet's activity log: every state change records one row, with its actor.

A bulk writer (the spool drain) may wrap its batch in `deferred()`: rows recorded inside
are inserted together, in order, in one statement when the block ends — still inside the
caller's transaction, so they commit or roll back with the changes they describe.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import models

from fleet.models import Activity, Agent, Fleet

_pending: ContextVar[list[Activity] | None] = ContextVar("pending_activity", default=None)


def record(
    fleet: Fleet,
    verb: str,
    *,
    target: models.Model | None = None,
    agent: Agent | None = None,
    user: Any = None,
    **data: Any,
) -> Activity:
    row = Activity(
        fleet=fleet,
        verb=verb,
        agent=agent,
        user=user if getattr(user, "pk", None) else None,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        data=data,
    )
    pending = _pending.get()
    if pending is None:
        row.save()
    else:
        pending.append(row)
    return row


@contextmanager
def deferred() -> Iterator[None]:
    """Collect the rows recorded in this block and insert them in one statement at its end."""
    rows: list[Activity] = []
    token = _pending.set(rows)
    try:
        yield
    finally:
        _pending.reset(token)
    Activity.objects.bulk_create(rows)
