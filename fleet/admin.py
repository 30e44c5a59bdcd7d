"""Admin pages for coordination data: browse and correct; state changes go through domain code.

Every page is scoped to the fleets the person may act on (fleet.scope): lists, change and
delete pages, add forms, the choices of every fleet-bound foreign key (so a forged id in
a POST fails validation), raw-id lookups and autocomplete (both start from the related
admin's scoped queryset). Another fleet's row looks exactly like a row that does not
exist. Who moderates which fleet is a superuser's business only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.postgres.aggregates import ArrayAgg
from django.contrib.postgres.fields import ArrayField
from django.db.models import Model, OuterRef, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Concat
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from fleet import deletion, scope, screen_view, tokens
from fleet.admin_screen import ScreenedAdmin, ScreenFilter, path_list
from fleet.globs import overlaps
from fleet.models import (
    WEBHOOK_SECRET_MAX_CHARS,
    Activity,
    Agent,
    ApiToken,
    Fleet,
    FleetModerator,
    Handoff,
    Incident,
    Lease,
    Session,
)

# How to reach the fleet from each fleet-bound model a form may point at.
FLEET_PATH: dict[type[Model], str] = {
    Fleet: "pk",
    Agent: "fleet",
    Session: "fleet",
    Handoff: "fleet",
    Lease: "fleet",
    ApiToken: "fleet",
}


def _superuser(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff and user.is_superuser)


class FleetScopedAdmin(admin.ModelAdmin[Any]):
    """A ModelAdmin whose every door is limited to the person's fleets (fleet.scope)."""

    fleet_field = "fleet"  # the path from a row to its fleet

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scope.scoped(super().get_queryset(request), request.user, self.fleet_field)

    def fleet_of(self, obj: Any) -> int | None:
        fleet_id = obj.pk if self.fleet_field == "pk" else getattr(obj, f"{self.fleet_field}_id")
        return cast("int | None", fleet_id)

    def _theirs(self, request: HttpRequest, obj: Any) -> bool:
        return obj is None or scope.may_act_on_fleet(request.user, self.fleet_of(obj))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) and (
            _superuser(request) or scope.granted_fleets(request.user).exists()
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) and self._theirs(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and self._theirs(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and self._theirs(request, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return super().has_add_permission(request, *args) and (
            _superuser(request) or scope.granted_fleets(request.user).exists()
        )

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        path = FLEET_PATH.get(db_field.related_model)
        if path is not None:
            kwargs["queryset"] = scope.scoped(
                db_field.related_model._default_manager.all(), request.user, path
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> Any:
        path = FLEET_PATH.get(db_field.related_model)
        if path is not None:  # a host token's agents: only the person's fleets' agents
            kwargs["queryset"] = scope.scoped(
                db_field.related_model._default_manager.all(), request.user, path
            )
        return super().formfield_for_manytomany(db_field, request, **kwargs)


class FleetModeratorInline(admin.TabularInline[FleetModerator, Fleet]):
    """Who moderates this fleet's claims. A grant only counts together with the
    claims.promote_claim permission; the review queue shows a person nothing else."""

    model = FleetModerator
    extra = 0
    fields = ("user", "granted_at")
    readonly_fields = ("granted_at",)
    raw_id_fields = ("user",)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    has_change_permission = has_add_permission = has_delete_permission = has_view_permission


class ScopedFilter(admin.RelatedFieldListFilter):
    """A fleet/agent filter listing only the person's fleets' rows."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        path = FLEET_PATH.get(field.related_model, "fleet")
        allowed = scope.scoped(field.related_model._default_manager.all(), request.user, path)
        ids = set(allowed.values_list("pk", flat=True))
        return [
            (pk, label)
            for pk, label in super().field_choices(field, request, model_admin)
            if pk in ids
        ]


class FleetForm(forms.ModelForm[Fleet]):
    """The fleet's settings, with the webhook secret write-only.

    The secret signs incidents (fleet/webhooks.py), so it must stay readable to the server,
    but no page needs to show it again: the field never renders its value, blank keeps the
    stored one while a URL is set, and blank with no URL forgets it (nothing left to sign).
    """

    incident_webhook_secret = forms.CharField(
        required=False, strip=False, max_length=WEBHOOK_SECRET_MAX_CHARS,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        label="Incident webhook secret")

    class Meta:
        model = Fleet
        fields = "__all__"  # noqa: DJ007 - the admin form: every editable field, as the admin chose them

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["incident_webhook_secret"]
        kept = bool(self.instance.pk and self.instance.incident_webhook_secret)
        field.help_text = (
            "The HMAC-SHA256 key the receiver checks the signature with; required with a "
            "webhook URL. Never shown again: "
            + ("a secret is set; leave blank to keep it, type a new one to replace it."
               if kept else "none is set."))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("incident_webhook_secret") and data.get("incident_webhook_url"):
            data["incident_webhook_secret"] = self.instance.incident_webhook_secret
        return data


@admin.register(Fleet)
class FleetAdmin(FleetScopedAdmin):
    form = FleetForm
    fleet_field = "pk"
    list_display = (
        "slug", "name", "memory_mode", "capture_mode", "default_lease_ttl_secs", "created_at"
    )
    list_filter = ("memory_mode", "capture_mode")
    search_fields = ("slug", "name")
    prepopulated_fields = {"slug": ("name",)}
    inlines = (FleetModeratorInline,)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return _superuser(request)  # a new fleet belongs to nobody yet

    def delete_model(self, request: HttpRequest, obj: Fleet) -> None:
        deletion.delete_fleet(obj)  # between two renders, not during one

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Fleet]) -> None:
        for fleet in queryset:
            deletion.delete_fleet(fleet)


@admin.register(FleetModerator)
class FleetModeratorAdmin(FleetScopedAdmin):
    """Grants: a person granted a fleet must not grant themselves (or others) more."""

    list_display = ("user", "fleet", "granted_at")
    list_filter = (("fleet", ScopedFilter),)
    search_fields = ("user__username", "fleet__slug")
    list_select_related = ("user", "fleet")
    raw_id_fields = ("user",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _superuser(request)

    has_change_permission = has_add_permission = has_delete_permission = has_view_permission


@admin.register(Agent)
class AgentAdmin(FleetScopedAdmin):
    list_display = ("agent_id", "fleet", "runtime", "host", "last_seen_at")
    list_filter = (("fleet", ScopedFilter), "runtime")
    search_fields = ("agent_id", "host")
    list_select_related = ("fleet",)


@admin.register(Session)
class SessionAdmin(ScreenedAdmin, FleetScopedAdmin):
    list_display = (
        "session_id",
        "fleet",
        "agent",
        "repo",
        "first_seen_at",
        "last_seen_at",
        "outcome",
        "summary_text",
        "screen",
    )
    list_filter = (("fleet", ScopedFilter), "outcome", ScreenFilter)
    search_fields = ("session_id", "repo", "summary")
    list_select_related = ("fleet", "agent")
    autocomplete_fields = ("agent",)
    # The paths and the withheld candidates are what the session reported: shown, not edited.
    shown_as = {"changed_paths": "changed_paths_list"}
    readonly_fields = ("capture_withheld_list",)

    @admin.display(description="summary")
    def summary_text(self, session: Session) -> str:
        return session.summary[:120]

    @admin.display(description="screen")
    def screen(self, session: Session) -> SafeString:
        """The summary's badge, and a count of capture candidates the screen held back."""
        held = len(session.capture_withheld) if isinstance(session.capture_withheld, list) else 0
        if not held:
            return super().screen(session)
        return format_html('{} <span class="screen-badge" title="{}">⚠ {} withheld</span>',
                           super().screen(session), "capture candidates the screen held back",
                           f"{held} candidate{'s' if held != 1 else ''}")

    @admin.display(description="changed paths")
    def changed_paths_list(self, session: Session) -> SafeString:
        return path_list(session.changed_paths)

    @admin.display(description="capture candidates withheld")
    def capture_withheld_list(self, session: Session) -> SafeString:
        return screen_view.withheld_candidates(session.capture_withheld)


class LeaseLiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("expired", "expired, not released"), ("released", "released")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "live":
                return queryset.active()  # type: ignore[attr-defined, no-any-return]
            case "expired":
                return queryset.expired()  # type: ignore[attr-defined, no-any-return]
            case "released":
                return queryset.filter(released_at__isnull=False)
        return queryset


def _now() -> datetime:
    return timezone.now()


@admin.register(Lease)
class LeaseAdmin(ScreenedAdmin, FleetScopedAdmin):
    """Leases with what the demo exists to show: which live leases overlap another's."""

    list_display = (
        "path",
        "fleet",
        "agent",
        "state",
        "overlap",
        "acquired_at",
        "expires_at",
        "released_at",
        "screen",
    )
    list_filter = (LeaseLiveFilter, ("fleet", ScopedFilter), ScreenFilter)
    search_fields = ("path", "reason")
    list_select_related = ("fleet", "agent")
    autocomplete_fields = ("agent", "session")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        """Each row carries the other agents' live leases of its fleet ("agent\tpath"), in
        one subquery, so the overlap column costs no query per row."""
        others = (
            Lease.objects.active(at=_now())
            .filter(fleet_id=OuterRef("fleet_id"))
            .exclude(agent_id=OuterRef("agent_id"))
            .order_by()
            .values("fleet_id")
            .annotate(items=ArrayAgg(Concat("agent__agent_id", Value("\t"), "path")))
            .values("items")
        )
        return cast(
            "QuerySet[Any]",  # the django plugin types annotate() on a QuerySet[Any] as Any
            super()
            .get_queryset(request)
            .annotate(live_others=Subquery(others, output_field=ArrayField(TextField()))),
        )

    @admin.display(description="state")
    def state(self, lease: Lease) -> str:
        if lease.released_at:
            return "released"
        return "live" if lease.expires_at > _now() else "expired"

    @admin.display(description="overlap")
    def overlap(self, lease: Lease) -> str:
        """Who else holds a live lease overlapping this live one (fleet.globs.overlaps)."""
        if not lease.is_active():
            return ""
        holders = sorted(
            {
                agent
                for agent, _, path in (
                    item.partition("\t") for item in getattr(lease, "live_others", None) or []
                )
                if overlaps(path, lease.path)
            }
        )
        if not holders:
            return ""
        return format_html('<span class="overlap">⚠ overlaps {}</span>', ", ".join(holders))


class HandoffForm(forms.ModelForm[Handoff]):
    """A handoff's change form that refuses to overwrite a change it did not show.

    Agents change handoffs by compare-and-swap on `version` (fleet.handoffs); a moderator's
    form held open while an agent picked the handoff up would otherwise save the page's
    older state over the pickup. The page carries the version it showed; on save the row is
    locked (the admin's change view is one transaction, so the lock holds until the save
    commits) and the form is refused if the version moved.
    """

    seen_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Handoff
        fields = ("fleet", "from_agent", "from_session", "summary", "status", "next_steps",
                  "source_trust", "state", "picked_up_by", "picked_up_session", "updated_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["seen_version"].initial = self.instance.version

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk is None:
            return data
        current = (Handoff.objects.select_for_update().filter(pk=self.instance.pk)
                   .values_list("version", flat=True).first())
        seen = data.get("seen_version")
        if current is not None and seen != current:
            raise forms.ValidationError(
                "This handoff changed after the page was opened (version %(seen)s, now "
                "%(current)s): reload the page and make the edit again.",
                code="stale", params={"seen": seen, "current": current})
        return data


@admin.register(Handoff)
class HandoffAdmin(ScreenedAdmin, FleetScopedAdmin):
    form = HandoffForm
    list_display = (
        "id",
        "fleet",
        "from_agent",
        "summary_text",
        "next_steps_text",
        "status",
        "state",
        "source_trust",
        "created_at",
        "screen",
    )
    list_filter = (("fleet", ScopedFilter), "state", "source_trust", "status", ScreenFilter)
    search_fields = ("summary", "next_steps")
    list_select_related = ("fleet", "from_agent")
    autocomplete_fields = ("from_agent", "from_session", "picked_up_by", "picked_up_session")
    readonly_fields = ("version", "picked_up_at")

    @admin.display(description="summary")
    def summary_text(self, handoff: Handoff) -> str:
        return handoff.summary[:160]

    @admin.display(description="next steps")
    def next_steps_text(self, handoff: Handoff) -> str:
        return handoff.next_steps[:160]


@admin.register(Activity)
class ActivityAdmin(FleetScopedAdmin):
    list_display = ("at", "fleet", "verb", "agent", "user", "target_type", "target_id")
    list_filter = (("fleet", ScopedFilter), "verb")
    list_select_related = ("fleet", "agent", "user")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


class ReadOnly:
    """Rows written only by domain functions: viewed here, never added, changed or deleted
    through a form."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Incident)
class IncidentAdmin(ReadOnly, FleetScopedAdmin):
    """Read-only: incidents are a record (fleet.incidents writes them), not something to
    edit; deleting one is left to the fleet's deletion."""

    list_display = ("at", "fleet", "kind", "actor", "holder", "short_paths",
                    "webhook_state")
    list_filter = (("fleet", ScopedFilter), "kind")
    list_select_related = ("fleet", "actor", "holder")
    search_fields = ("actor__agent_id", "holder__agent_id", "detail")
    date_hierarchy = "at"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Incident._meta.fields]

    @admin.display(description="paths")
    def short_paths(self, obj: Incident) -> str:
        paths = [str(p) for p in obj.paths or []]
        return ", ".join(paths[:3]) + (f" (+{len(paths) - 3})" if len(paths) > 3 else "")

    @admin.display(description="webhook")
    def webhook_state(self, obj: Incident) -> str:
        if obj.webhook_delivered_at:
            return f"delivered ({obj.webhook_attempts} attempt(s))"
        if obj.webhook_next_at:
            return f"pending, {obj.webhook_attempts} attempt(s) so far"
        if obj.webhook_attempts:
            return f"given up after {obj.webhook_attempts}: {obj.webhook_last_error}"
        return "—"


class ApiTokenForm(forms.ModelForm[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ("fleet", "name", "role", "agent", "relays_for")

    def _value(self, data: dict[str, Any], name: str) -> Any:
        """The field's cleaned value, or the saved one when the page shows it read-only."""
        return data.get(name) if name in self.fields else getattr(self.instance, name, None)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        fleet = self._value(data, "fleet")
        role, agent = self._value(data, "role"), self._value(data, "agent")
        relays = list(data.get("relays_for") or [])
        if fleet and role:  # the one rule, as issue_token and set_relays apply it
            problem = tokens.fit_problem(fleet, role, agent, relays)
            if problem:
                self.add_error("relays_for" if "relays_for" in self.fields else None,
                               problem[0].upper() + problem[1:] + ".")
        if "name" in self.fields:
            live = ApiToken.objects.filter(fleet=fleet, name=data.get("name"), revoked_at=None)
            if fleet and live.exists():
                self.add_error("name", "This fleet already has a live token with this name.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(FleetScopedAdmin):
    """Issue (the secret is shown once, in a message) and revoke; never deleted. The one
    edit: a live host token's agents (an agent joins or leaves the host), audited."""

    form = ApiTokenForm
    list_display = (
        "name",
        "fleet",
        "role",
        "agent",
        "relayed",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = (("fleet", ScopedFilter), "role")
    search_fields = ("name", "prefix")
    list_select_related = ("fleet", "agent")
    autocomplete_fields = ("agent",)
    filter_horizontal = ("relays_for",)
    actions = ("revoke_selected",)
    FIXED = (
        "fleet",
        "name",
        "role",
        "agent",
        "prefix",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        return super().get_queryset(request).prefetch_related("relays_for")

    @admin.display(description="relays for")
    def relayed(self, obj: ApiToken) -> str:
        return ", ".join(sorted(a.agent_id for a in obj.relays_for.all())) or "—"

    def _relays_editable(self, obj: ApiToken | None) -> bool:
        return obj is not None and obj.role == ApiToken.Role.HOST and obj.revoked_at is None

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ()
        return self.FIXED if self._relays_editable(obj) else (*self.FIXED, "relayed")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ("fleet", "name", "role", "agent", "relays_for")
        return (*self.FIXED, "relays_for") if self._relays_editable(obj) else (
            *self.FIXED, "relayed")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # revoke instead: the row is the audit trail of the credential

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        issued = tokens.issue_token(
            obj.fleet,
            role=obj.role,
            name=obj.name,
            agent=obj.agent,
            relays=form.cleaned_data.get("relays_for") or (),
            by=request.user,
        )
        obj.pk, obj.prefix, obj.key_hash = (
            issued.token.pk,
            issued.token.prefix,
            issued.token.key_hash,
        )
        obj.created_at = issued.token.created_at
        self.message_user(
            request,
            f"Token {obj.name!r} issued. Copy the secret now, it is not shown again: "
            f"{issued.secret}",
            messages.WARNING,
        )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """issue_token set the agents of a new token; a change goes through set_relays,
        which records who was added and removed (never form.save_m2m, which would not)."""
        if change and "relays_for" in form.cleaned_data:
            tokens.set_relays(form.instance, form.cleaned_data["relays_for"], by=request.user)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_selected(self, request: HttpRequest, qs: QuerySet[ApiToken]) -> None:
        done = sum(tokens.revoke_token(t, by=request.user) for t in qs.select_related("fleet"))
        self.message_user(request, f"Revoked {done}; {qs.count() - done} already were.")
