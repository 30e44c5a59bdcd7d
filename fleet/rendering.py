"""Asking for a fleet's cache to be re-rendered, debounced.

Many changes arrive in bursts (a drain applying a batch, a moderator promoting ten claims).
Each asks for a render; only the first in a window schedules one, a moment later, and the
render picks up everything that changed in between. The mechanism is django-q2's own
one-off Schedule, so it works across processes and hosts on any broker.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from fleet.models import Fleet

RENDER_TASK = "ctxlake_site.workers.render_fleet_cache"
DEBOUNCE = timedelta(seconds=2)


def pending_key(fleet_id: int) -> str:
    return f"ctxlake:render-pending:{fleet_id}"


def request_render(fleet: Fleet) -> None:
    """After the current transaction commits, make sure a render of `fleet` is coming."""
    transaction.on_commit(lambda: _schedule(fleet.pk))


def _schedule(fleet_id: int) -> None:
    from django_q.models import Schedule

    # cache.add is atomic: of many concurrent requests, exactly one wins the window.
    if not cache.add(pending_key(fleet_id), "1", timeout=int(DEBOUNCE.total_seconds()) + 60):
        return
    Schedule.objects.create(
        name=f"render fleet {fleet_id} {timezone.now():%H%M%S%f}",
        func=RENDER_TASK,
        args=repr((fleet_id,)),
        schedule_type=Schedule.ONCE,
        repeats=1,
        next_run=timezone.now() + DEBOUNCE,
    )
