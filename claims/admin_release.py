"""The admin's "Release flagged text" action, on the claims admin and on fleet's admins of
sessions, leases and handoffs.

Releasing is claims.release.release_text: the right to release is the right to moderate
(claims.moderation.can_moderate), and fleet may not import claims. So fleet's admins show
the flags themselves (fleet.admin_screen) and this module, one layer up, registers
subclasses of them that add the action: fleet stays complete without claims, the action
exists once, and no hook or global slot has to be filled at start-up for it to work.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from claims import admin_scope, release
from claims.moderation import GateRefused
from fleet import admin as fleet_admin
from fleet.models import Handoff, Lease, Session

BULK_LIMIT = 200  # rows released by one click; each is its own transaction and render


class ReleaseAction:
    """Mixin for a ModelAdmin of Screened rows: "Release flagged text" for moderators."""

    def has_release_permission(self, request: HttpRequest) -> bool:
        return admin_scope.is_moderator(request.user)

    @admin.action(description="Release flagged text", permissions=["release"])
    def release_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        """Release each selected row through claims.release (audited, fleet by fleet
        checked there); report how many were released, had nothing waiting, were refused."""
        rows = list(queryset.order_by("pk")[: BULK_LIMIT + 1])
        if len(rows) > BULK_LIMIT:
            self.message_user(request, f"Select at most {BULK_LIMIT} rows at a time.",  # type: ignore[attr-defined]
                              messages.ERROR)
            return
        done, nothing, refused = 0, 0, set()
        for row in rows:
            try:
                release.release_text(row, by=request.user)
                done += 1
            except release.NothingToRelease:
                nothing += 1
            except GateRefused as exc:
                refused.add(str(exc))
        said = f"Released flagged text of {done}; agents see it as written."
        if nothing:
            said += f" {nothing} had nothing waiting."
        if refused:
            said += f" {len(rows) - done - nothing} refused: " + " ".join(sorted(refused))
        level = messages.SUCCESS if done and not refused else messages.WARNING
        self.message_user(request, said, level)  # type: ignore[attr-defined]


def _releasing(base: type[admin.ModelAdmin[Any]]) -> type[admin.ModelAdmin[Any]]:
    """`base` (one of fleet's admins) with the release action added to its own."""
    return type(base.__name__, (ReleaseAction, base), {
        "__module__": __name__,
        "__doc__": f"{base.__doc__ or base.__name__}\n\nWith claims' release action.",
        "actions": (*(base.actions or ()), "release_selected"),
    })


for _model, _base in ((Session, fleet_admin.SessionAdmin), (Lease, fleet_admin.LeaseAdmin),
                      (Handoff, fleet_admin.HandoffAdmin)):
    admin.site.unregister(_model)  # registered by fleet.admin, imported above
    admin.site.register(_model, _releasing(_base))
