"""Retention: what a fleet's ages (Fleet.retain_*_days, fleet.models.RETENTION) let go.

Four kinds of rows grow with use and are pruned by age, per fleet: Activity, AppliedEvent
and DeadLetter rows are deleted; a Session keeps its row (evidence cites its id, and the
independent-session count asks whether the fleet saw it) and loses what was taken from
its transcript. Claim events are never pruned: they are the audit trail (claims own them,
and this module cannot even name them).

`next_prune()` counts what a prune would touch now (doctor, and maintain_db's dry run);
`prune()` does it in batches, each its own short transaction, so a prune of millions of
rows never holds a long lock and a kill loses at most one batch's progress (the next run
picks up from the ages, which are the only state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import models, transaction
from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from fleet.models import (
    RETAIN_ACTIVITY,
    RETAIN_APPLIED,
    RETAIN_DEAD,
    RETAIN_TRANSCRIPT,
    RETENTION,
    Activity,
    AppliedEvent,
    DeadLetter,
    Fleet,
    Retention,
    Session,
)

DEFAULT_BATCH = 5_000
MAX_BATCH = 100_000
#: What clearing a session's transcript-derived fields sets them to.
CLEARED = {"summary": "", "changed_paths": [], "capture_withheld": [], "screen_flags": {}}
#: The rule's short name, as progress lines and --json name it.
KIND = {RETAIN_ACTIVITY: "activity", RETAIN_APPLIED: "applied_events",
        RETAIN_DEAD: "dead_letters", RETAIN_TRANSCRIPT: "session_transcripts"}


@dataclass
class Pruned:
    fleet: str
    kind: str
    days: int  # 0: kept for good, nothing matched
    older_than: datetime | None
    matched: int  # rows past the age when the run started
    done: int = 0  # rows deleted (or sessions cleared); 0 in a dry run


#: The rows each deleting rule prunes, and the time their age is measured from.
DELETED: dict[Retention, tuple[type[models.Model], str]] = {
    RETAIN_ACTIVITY: (Activity, "at"),
    RETAIN_APPLIED: (AppliedEvent, "applied_at"),
    RETAIN_DEAD: (DeadLetter, "created_at"),
}


def due(fleet: Fleet, rule: Retention, *, now: datetime) -> QuerySet[models.Model]:
    """The fleet's rows this rule would prune now (none when its age is 0: keep for good)."""
    days = getattr(fleet, rule.field)
    cutoff = now - timedelta(days=days)
    if rule in DELETED:
        model, moment = DELETED[rule]
        rows = model._default_manager.filter(fleet=fleet, **{f"{moment}__lt": cutoff})
    else:
        rows = _transcripts_due(fleet, cutoff)
    return rows.none() if days == 0 else rows


def _transcripts_due(fleet: Fleet, cutoff: datetime) -> QuerySet[models.Model]:
    """Sessions that ended (or, never ended, started) before `cutoff` and still hold
    something taken from a transcript; cleared ones no longer match, so a rerun is a no-op."""
    held = ~Q(summary="") | ~Q(changed_paths=[]) | ~Q(capture_withheld=[])
    return (Session.objects.filter(fleet=fleet)
            .annotate(_ended=Coalesce("ended_at", "started_at"))
            .filter(held, _ended__lt=cutoff))


def next_prune(fleets: QuerySet[Fleet] | None = None, *, now: datetime | None = None,
               ) -> list[Pruned]:
    """What a prune would touch now, per fleet and rule (nothing changes)."""
    now = now or timezone.now()
    return [_counted(fleet, rule, now) for fleet in _fleets(fleets) for rule in RETENTION]


def prune(fleets: QuerySet[Fleet] | None = None, *, batch: int = DEFAULT_BATCH,
          now: datetime | None = None, say: Callable[[Pruned], None] = lambda p: None,
          ) -> list[Pruned]:
    """Prune every fleet by its ages, `batch` rows per transaction; `say` hears each batch."""
    if not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be 1–{MAX_BATCH}; got {batch}")
    now = now or timezone.now()
    out = []
    for fleet in _fleets(fleets):
        for rule in RETENTION:
            result = _counted(fleet, rule, now)
            for step in _batches(due(fleet, rule, now=now), rule, batch):
                result.done += step
                say(result)
            out.append(result)
    return out


def _fleets(fleets: QuerySet[Fleet] | None) -> Iterator[Fleet]:
    return (Fleet.objects.all() if fleets is None else fleets).order_by("slug").iterator()


def _counted(fleet: Fleet, rule: Retention, now: datetime) -> Pruned:
    days = getattr(fleet, rule.field)
    return Pruned(fleet.slug, KIND[rule], days, now - timedelta(days=days) if days else None,
                  due(fleet, rule, now=now).count())


def _batches(rows: QuerySet[models.Model], rule: Retention, batch: int) -> Iterator[int]:
    """Each batch's count, until none is left. Ids first, then one statement on them: a
    DELETE … LIMIT does not exist in Postgres, and a bounded id list keeps each
    transaction short whatever the table's size."""
    model = rows.model
    while True:
        with transaction.atomic():
            ids = list(rows.order_by("pk").values_list("pk", flat=True)[:batch])
            chosen = model._default_manager.filter(pk__in=ids)
            if rule is RETAIN_TRANSCRIPT:
                count = chosen.update(**CLEARED) if ids else 0
            else:
                count = chosen.delete()[0] if ids else 0
        if not count:
            return
        yield count  # after COMMIT: progress reports only what is done
