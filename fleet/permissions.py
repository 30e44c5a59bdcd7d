"""FleetScoped: find the fleet from the URL, check the caller belongs to it, then the role.

Order matters: a caller who is not in the fleet gets 404 whatever the role (a fleet you do
not belong to looks exactly like one that does not exist), and only then does a role that
is too weak get 403. Views declare which roles may run each action in `roles`; an action
missing there is operator-only, so a forgotten entry fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from fleet import scope
from fleet.models import ApiToken, Fleet

AGENT, INTEGRATION, HOST, OPERATOR = (
    ApiToken.Role.AGENT,
    ApiToken.Role.INTEGRATION,
    ApiToken.Role.HOST,
    ApiToken.Role.OPERATOR,
)
#: Who may do what; the roles are described in docs/api.md.
READ = frozenset({AGENT, INTEGRATION, OPERATOR})
SESSIONS = READ  # SessionStart/SessionEnd hooks run with integration tokens
PROPOSE = READ
COORDINATE = frozenset({AGENT, OPERATOR})
MODERATE = frozenset({OPERATOR})
#: What an agent host's `sync` reads (cache files, the snapshot's delta, the change feed).
#: A host token gets only this and RELAY: it moves its agents' writes and the fleet's
#: render between host and server, and asks the server nothing else.
SYNC = READ | {HOST}
#: The spool upload; which agents a token may name is checked per line (fleet.api_spool).
RELAY = COORDINATE | {HOST}


def _session_role(request: Request, fleet: Fleet) -> str | None:
    """A staff member in the browsable API: operator if they may moderate the fleet."""
    user = request.user
    if not scope.may_act_on_fleet(user, fleet):  # the one rule, shared with admin and manage.py
        return None
    if user.is_superuser:
        return OPERATOR
    return OPERATOR if scope.moderates(user) else INTEGRATION


def caller_role(request: Request, fleet_slug: str) -> tuple[Fleet, str]:
    """The caller's fleet and role for this URL; NotFound if they are not in that fleet."""
    token = request.auth
    if isinstance(token, ApiToken):
        if token.fleet.slug != fleet_slug:
            raise exceptions.NotFound()
        return token.fleet, token.role
    fleet = Fleet.objects.filter(slug=fleet_slug).first()
    role = _session_role(request, fleet) if fleet is not None else None
    if fleet is None or role is None:
        raise exceptions.NotFound()
    return fleet, role


class FleetRequest(Request):
    """A Request FleetScoped let through; a name for the type checker, never constructed."""

    fleet: Fleet
    role: str


class FleetScoped(BasePermission):
    """Sets request.fleet and request.role; the view's queryset starts from request.fleet."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user or not request.user.is_authenticated:
            raise exceptions.NotAuthenticated()
        fleet, role = caller_role(request, view.kwargs.get("fleet", ""))
        scoped = cast(FleetRequest, request)
        scoped.fleet, scoped.role = fleet, role
        roles: Mapping[str, frozenset[str]] = getattr(view, "roles", {})
        action = getattr(view, "action", None) or cast(str, request.method).lower()
        if role not in roles.get(action, MODERATE):
            raise exceptions.PermissionDenied(f"A {role} token may not do this.")
        return True
