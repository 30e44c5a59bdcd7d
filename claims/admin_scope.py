"""Who may see which claims in the admin: moderators see the fleets they are granted.

claims.moderation.can_moderate decides whether one person may act on one fleet; this
module answers the admin's bulk question, "which rows may this person even see", as a
queryset filter, so that lists, filters, counts and forged ids all start from it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from claims.models import ClaimQuerySet
from fleet.models import Fleet, FleetModerator

PERMISSION = "claims.promote_claim"


def is_moderator(user: Any) -> bool:
    """Active staff holding the moderation permission (superusers always)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
        return False
    return bool(user.is_superuser or user.has_perm(PERMISSION))


def granted_fleets(user: Any) -> QuerySet[Fleet]:
    """The fleets `user` moderates: every fleet for a superuser, their grants otherwise."""
    if not is_moderator(user):
        return Fleet.objects.none()
    if user.is_superuser:
        return Fleet.objects.all()
    return Fleet.objects.filter(pk__in=FleetModerator.objects.filter(user=user).values("fleet"))


def visible(qs: QuerySet[Any], user: Any, fleet_field: str = "fleet") -> QuerySet[Any]:
    """Restrict `qs` (claims, or anything with a path to a fleet) to `user`'s fleets."""
    if not is_moderator(user):
        return qs.none()
    if user.is_superuser:
        return qs
    grants = FleetModerator.objects.filter(user=user).values("fleet")
    return qs.filter(**{f"{fleet_field}__in": grants})


def visible_claims(qs: ClaimQuerySet, user: Any) -> ClaimQuerySet:
    return visible(qs, user)  # type: ignore[return-value]
