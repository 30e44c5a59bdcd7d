"""Memory health: the promoted claims a moderator should look at again, by reason.

Readers only (no side effects); the page that shows them and its bulk actions are
claims.admin_health, which acts through claims.moderation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, F, OuterRef, Q, QuerySet

from claims import contradictions
from claims.models import Claim, ClaimFeedback, ClaimUse, Contradiction
from fleet.models import Fleet

#: A promoted claim no session was shown for this long is listed as unused.
UNSERVED_DAYS = 30
#: Listed as failing when at least this many sessions that used it failed, and more failed
#: than succeeded.
FAILED_MIN = 2
SHOWN = 100  # rows per section


@dataclass
class Health:
    unserved: list[Claim]
    failing: list[Claim]
    flagged: list[Claim]
    stale: list[Claim]
    conflicting: list[Contradiction]

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in vars(self).items()}


def live(fleet: Fleet, now: datetime) -> QuerySet[Claim]:
    return Claim.objects.for_fleet(fleet).live(now).defer("embedding", "search_vector")


def of_fleet(fleet: Fleet, *, now: datetime, days: int = UNSERVED_DAYS) -> Health:
    since = now - timedelta(days=days)
    claims = live(fleet, now)
    recently = ClaimUse.objects.filter(claim=OuterRef("pk"), first_served_at__gte=since)
    open_feedback = ClaimFeedback.objects.filter(claim=OuterRef("pk"), resolution="")
    return Health(
        unserved=_top(claims.filter(promoted_at__lt=since).exclude(Exists(recently))
                      .order_by("promoted_at")),
        failing=_top(claims.filter(used_failed__gte=FAILED_MIN,
                                   used_failed__gt=F("used_succeeded"))
                     .order_by("-used_failed")),
        flagged=_top(claims.filter(Q(open_flags__gt=0) | Exists(open_feedback))
                     .order_by("-open_flags", "number")),
        stale=_top(claims.filter(staleness__gt=0).order_by("-staleness", "number")),
        conflicting=contradictions.open_pairs(fleet)[:SHOWN],
    )


def _top(qs: QuerySet[Claim]) -> list[Claim]:
    return list(qs[:SHOWN])
