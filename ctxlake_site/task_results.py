"""The workers' successful task results: kept a day, then pruned in bulk by the daily job.

django-q2 bounds the results it keeps itself (Q_CLUSTER `save_limit`, 250 by default), and
enforces the bound as it saves each result: it reads every kept success row under FOR
UPDATE — all 250, their pickled arguments and results — to delete the oldest one. Under a
steady stream of renders and embedding passes (one or two a second) that was about
3 ms of worker and Postgres CPU for each task, measured on no-op tasks (2026-12-05).
settings.Q_CLUSTER sets `save_limit` to 0 (django-q2 then keeps every result and reads
none), and `maintain_db` prunes results older than KEPT once a day, in one statement.
Failed tasks are kept, as django-q2 keeps them, for a person to look at.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django_q.models import Success

#: How long a successful task's result stays (the admin's "Successful tasks", benchmarks
#: counting what the workers ran).
KEPT = timedelta(days=1)


def prune(*, commit: bool, now: datetime | None = None) -> int:
    """Delete the successful results older than KEPT; how many (would be) deleted."""
    old = Success.objects.filter(stopped__lt=(now or timezone.now()) - KEPT)
    if not commit:
        return int(old.count())
    deleted, _ = old.delete()
    return int(deleted)
