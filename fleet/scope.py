"""Which fleets a person (or an operator token) may act on: the one rule, for every door.

The admin (fleet and claims pages alike), the REST API's browsable session login and the
`manage.py claims` command all ask here. A superuser may act on every fleet; any other
active staff member only on the fleets a FleetModerator row grants them; an operator API
token only on its own fleet, and only while unrevoked. Whether they may *moderate claims*
there additionally needs Claims' moderation permission: Claims owns it and hands its check
over at start-up (`hand_over_moderator_rule`, from claims.apps), so Fleet never names
another app's permission or imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet

from fleet.models import ApiToken, Fleet, FleetModerator


def _superuser(actor: Any) -> bool:
    return bool(getattr(actor, "is_superuser", False))


#: Does a person hold the right to moderate claims? Until Claims hands its rule over, only
#: a superuser does (fail closed).
_moderator_rule: Callable[[Any], bool] = _superuser


def hand_over_moderator_rule(rule: Callable[[Any], bool]) -> None:
    """Set the check `moderates` asks (Claims' permission, from claims.apps)."""
    global _moderator_rule
    _moderator_rule = rule


def moderates(actor: Any) -> bool:
    """Does this person hold the right to moderate claims (on the fleets that are theirs)?"""
    return _person(actor) and _moderator_rule(actor)


def _person(actor: Any) -> bool:
    return bool(getattr(actor, "is_active", False) and getattr(actor, "is_staff", False))


def granted_fleets(actor: Any) -> QuerySet[Fleet]:
    """The fleets `actor` may act on (a queryset, so callers can filter by it set-wise)."""
    if isinstance(actor, ApiToken):
        if actor.role != ApiToken.Role.OPERATOR or actor.revoked_at is not None:
            return Fleet.objects.none()
        return Fleet.objects.filter(pk=actor.fleet_id)
    if not _person(actor):
        return Fleet.objects.none()
    if actor.is_superuser:
        return Fleet.objects.all()
    return Fleet.objects.filter(pk__in=FleetModerator.objects.filter(user=actor).values("fleet"))


def may_act_on_fleet(actor: Any, fleet: Fleet | int | None) -> bool:
    """May `actor` see and change fleet `fleet`'s rows? None (no fleet yet) is never theirs
    unless they are a superuser."""
    if fleet is None:
        return _person(actor) and bool(getattr(actor, "is_superuser", False))
    fleet_id = fleet if isinstance(fleet, int) else fleet.pk
    if _person(actor) and actor.is_superuser:
        return True
    return granted_fleets(actor).filter(pk=fleet_id).exists()


def scoped(qs: QuerySet[Any], actor: Any, fleet_field: str = "fleet") -> QuerySet[Any]:
    """`qs` limited to rows of fleets `actor` may act on; `fleet_field` is the path from the
    row to its fleet ("fleet", "claim__fleet", or "pk" for fleets themselves)."""
    if _person(actor) and actor.is_superuser:
        return qs
    grants = granted_fleets(actor).values("pk")
    return qs.filter(**{f"{fleet_field}__in": grants})
