"""The instruction screen on fleet's admin pages: a badge, a filter, the text marked.

Sessions, leases and handoffs hold text one agent wrote for others (Screened). Their
change pages show that text with the screen's spans marked (fleet.screen_view) instead
of as an editable field: a form would let a person rewrite a released text without a new
screen, and the verdict is only ever set by the domain action that writes the text.

Releasing is not here. Who may release, and the audited release itself, belong to the
claims app (claims.release: the right to release is the right to moderate), which fleet
may not import; claims.admin_release extends these admins with the action instead.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from fleet import screen_view
from fleet.reveal import reveal


class ScreenFilter(admin.SimpleListFilter):
    """screen: flagged (withheld, waiting for a person) / released / clean."""

    title = "screen"
    parameter_name = "screen"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(screen_view.STATE_LABELS)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value not in screen_view.STATE_Q:
            return queryset.none()  # a forged value matches nothing
        return self.in_state(queryset, value)

    def in_state(self, queryset: QuerySet[Any], state: str) -> QuerySet[Any]:
        return queryset.filter(screen_view.STATE_Q[state])


class ScreenedAdmin(admin.ModelAdmin[Any]):
    """Mixin for the admin of a Screened model: the badge column, the filter, and on the
    change page each screened field read-only with its spans marked, plus who released it."""

    #: Read-only displays standing in for model fields on the change page, in place.
    shown_as: ClassVar[dict[str, str]] = {}

    class Media:
        css = {"all": ("fleet/screen.css",)}

    def _shown_as(self) -> dict[str, str]:
        screened = {name: f"{name}_marked" for name in self.model.SCREENED_FIELDS}
        return {**screened, **self.shown_as}

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, None)
        if obj is None:
            return fields
        swap = self._shown_as()
        shown = [swap.get(name, name) for name in cast("list[str]", fields)]  # flat: none groups
        return [*dict.fromkeys(shown), "screen_status"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        base = tuple(super().get_readonly_fields(request, obj))
        if obj is None:
            return base
        return (*base, *self._shown_as().values(), "screen_status")

    @admin.display(description="screen")
    def screen(self, row: Any) -> SafeString:
        return screen_view.badge(row.screen_flags, pending=row.screen_pending)

    @admin.display(description="screen")
    def screen_status(self, row: Any) -> SafeString:
        return screen_view.status(row)

    @admin.display(description="summary")
    def summary_marked(self, row: Any) -> SafeString:
        return screen_view.field(row, "summary")

    @admin.display(description="next steps")
    def next_steps_marked(self, row: Any) -> SafeString:
        return screen_view.field(row, "next_steps")

    @admin.display(description="reason")
    def reason_marked(self, row: Any) -> SafeString:
        return screen_view.field(row, "reason")


def path_list(paths: Any) -> SafeString:
    """A session's changed paths, one per line, hidden code points shown."""
    rows = [str(p) for p in paths] if isinstance(paths, list) else []
    if not rows:
        return SafeString('<span class="help">none</span>')
    return format_html_join("", "<code>{}</code><br>", ((reveal(p),) for p in rows))
