"""Writing the fleet's activity log: every state change records one row, with its actor."""

from __future__ import annotations

from typing import Any

from django.db import models

from fleet.models import Activity, Agent, Fleet


def record(
    fleet: Fleet,
    verb: str,
    *,
    target: models.Model | None = None,
    agent: Agent | None = None,
    user: Any = None,
    **data: Any,
) -> Activity:
    return Activity.objects.create(
        fleet=fleet,
        verb=verb,
        agent=agent,
        user=user if getattr(user, "pk", None) else None,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        data=data,
    )
