"""Releasing flagged text: a person's decision that words the instruction screen held back
may reach other agents.

The screen (mcp_bridge.contract.screen) flags text at ingest and the renderers withhold it
from every agent; only this function lets it through, for one row at a time, in one
transaction with its audit row and a render of the fleet's cache. It lives in the claims
app because the right to release is the right to moderate (claims.moderation.can_moderate):
whoever may decide what the fleet's memory says may decide what its notes say.
"""

from __future__ import annotations

from typing import Any, cast

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from claims.models import Claim, Evidence
from claims.moderation import GateRefused, can_moderate
from fleet import activity, rendering
from fleet import screen_view as sv
from fleet.models import ApiToken, Screened

RELEASED = "screen.released"


class NothingToRelease(Exception):
    """The row holds no flagged text waiting for a person."""


@transaction.atomic
def release_text(row: Screened, *, by: Any, note: str = "") -> Screened:
    """Let `row`'s flagged text reach agents; a claim's release covers its evidence too.

    Recorded as a `screen.released` activity naming the person (or operator token), the
    fields and the reasons the screen gave, so the audit shows what was let through.
    """
    fleet = _fleet(row)
    if not can_moderate(by, fleet):
        raise GateRefused("You may not release flagged text in this fleet.")
    # The abstract Screened declares no manager for mypy; each concrete model has `objects`.
    locked: Screened = cast(Any, type(row)).objects.select_for_update().get(pk=row.pk)
    rows: list[Screened] = [locked]
    if isinstance(locked, Claim):
        rows += list(locked.evidence.select_for_update())
    pending = [r for r in rows if r.screen_pending]
    if not pending:
        raise NothingToRelease(f"{_label(locked)} holds no flagged text waiting for release")
    now, user = timezone.now(), None if isinstance(by, ApiToken) else by
    for r in pending:
        cast(Any, type(r)).objects.filter(pk=r.pk).update(
            screen_released_at=now, screen_released_by=user)
    activity.record(
        fleet, RELEASED, target=locked, user=user, note=note.strip(),
        fields=sorted({f for r in pending for f in r.screen_flags}),
        rules=sorted({s["rule"] for r in pending for v in r.screen_flags.values() for s in v}),
        **cast("dict[str, Any]", {"token": by.prefix} if isinstance(by, ApiToken) else {}),
    )
    rendering.request_render(fleet)
    locked.refresh_from_db()
    return locked


def claims_in_state(qs: QuerySet[Claim], state: str) -> QuerySet[Claim]:
    """Claims by the screen's verdict on their text and their excerpts together, as a
    release treats them: flagged while any waits for a person, released once every
    flagged one was released, clean if the screen found nothing in any of them."""
    excerpts, q = Evidence.objects.order_by(), sv.STATE_Q
    if state == sv.FLAGGED:
        waiting: QuerySet[Any, Any] = excerpts.filter(q[sv.FLAGGED]).values("claim_id")
        return qs.filter(q[sv.FLAGGED] | Q(pk__in=waiting))
    flagged_excerpts = excerpts.exclude(q[sv.CLEAN]).values("claim_id")
    if state == sv.CLEAN:
        return qs.filter(q[sv.CLEAN]).exclude(pk__in=flagged_excerpts)
    if state != sv.RELEASED:
        raise ValueError(f"no screen state {state!r}")
    waiting = claims_in_state(Claim.objects.order_by(), sv.FLAGGED).values("pk")
    return qs.filter(q[sv.RELEASED] | Q(pk__in=flagged_excerpts)).exclude(pk__in=waiting)


def _fleet(row: Screened) -> Any:
    return row.claim.fleet if isinstance(row, Evidence) else row.fleet  # type: ignore[attr-defined]


def _label(row: Screened) -> str:
    return getattr(row, "public_id", None) or f"{row._meta.verbose_name} {row.pk}"
