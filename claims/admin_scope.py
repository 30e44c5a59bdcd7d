"""Who may see which claims in the admin: moderators see the fleets they are granted.

Which fleets are a person's is fleet.scope's rule (the one rule for admin, REST and
manage.py); this module adds the claims side's condition, the moderation permission, and
answers the admin's bulk question, "which rows may this person even see", as a queryset
filter, so that lists, filters, counts and forged ids all start from it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from claims.models import MODERATE_PERMISSION, ClaimQuerySet
from fleet import scope
from fleet.models import Fleet


def is_moderator(user: Any) -> bool:
    """Active staff holding the moderation permission (superusers always)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
        return False
    return bool(user.is_superuser or user.has_perm(MODERATE_PERMISSION))


def granted_fleets(user: Any) -> QuerySet[Fleet]:
    """The fleets `user` moderates: every fleet for a superuser, their grants otherwise."""
    if not is_moderator(user):
        return Fleet.objects.none()
    return scope.granted_fleets(user)


def visible(qs: QuerySet[Any], user: Any, fleet_field: str = "fleet") -> QuerySet[Any]:
    """Restrict `qs` (claims, or anything with a path to a fleet) to `user`'s fleets."""
    if not is_moderator(user):
        return qs.none()
    return scope.scoped(qs, user, fleet_field)


def visible_claims(qs: ClaimQuerySet, user: Any) -> ClaimQuerySet:
    return visible(qs, user)  # type: ignore[return-value]
