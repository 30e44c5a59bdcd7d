"""Admin pages for coordination data: browse and correct; state changes go through domain code."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet import tokens
from fleet.models import (
    Activity,
    Agent,
    ApiToken,
    Fleet,
    FleetModerator,
    Handoff,
    Lease,
    Session,
)


class FleetModeratorInline(admin.TabularInline[FleetModerator, Fleet]):
    """Who moderates this fleet's claims. A grant only counts together with the
    claims.promote_claim permission; the review queue shows a person nothing else."""

    model = FleetModerator
    extra = 0
    fields = ("user", "granted_at")
    readonly_fields = ("granted_at",)
    raw_id_fields = ("user",)


@admin.register(Fleet)
class FleetAdmin(admin.ModelAdmin[Fleet]):
    list_display = ("slug", "name", "memory_mode", "default_lease_ttl_secs", "created_at")
    list_filter = ("memory_mode",)
    search_fields = ("slug", "name")
    prepopulated_fields = {"slug": ("name",)}
    inlines = (FleetModeratorInline,)


@admin.register(FleetModerator)
class FleetModeratorAdmin(admin.ModelAdmin[FleetModerator]):
    list_display = ("user", "fleet", "granted_at")
    list_filter = ("fleet",)
    search_fields = ("user__username", "fleet__slug")
    list_select_related = ("user", "fleet")
    raw_id_fields = ("user",)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin[Agent]):
    list_display = ("agent_id", "fleet", "runtime", "host", "last_seen_at")
    list_filter = ("fleet", "runtime")
    search_fields = ("agent_id", "host")
    list_select_related = ("fleet",)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin[Session]):
    list_display = ("session_id", "fleet", "agent", "repo", "started_at", "ended_at", "outcome")
    list_filter = ("fleet", "outcome")
    search_fields = ("session_id", "repo", "summary")
    list_select_related = ("fleet", "agent")
    raw_id_fields = ("agent",)


@admin.register(Lease)
class LeaseAdmin(admin.ModelAdmin[Lease]):
    list_display = ("path", "fleet", "agent", "acquired_at", "expires_at", "released_at")
    list_filter = ("fleet",)
    search_fields = ("path", "reason")
    list_select_related = ("fleet", "agent")
    raw_id_fields = ("agent", "session")


@admin.register(Handoff)
class HandoffAdmin(admin.ModelAdmin[Handoff]):
    list_display = ("id", "fleet", "from_agent", "status", "source_trust", "state", "created_at")
    list_filter = ("fleet", "state", "source_trust", "status")
    search_fields = ("summary", "next_steps")
    list_select_related = ("fleet", "from_agent")
    raw_id_fields = ("from_agent", "from_session", "picked_up_by", "picked_up_session")
    readonly_fields = ("version", "picked_up_at")


@admin.register(Activity)
class ActivityAdmin(admin.ModelAdmin[Activity]):
    list_display = ("at", "fleet", "verb", "agent", "user", "target_type", "target_id")
    list_filter = ("fleet", "verb")
    list_select_related = ("fleet", "agent", "user")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


class ApiTokenForm(forms.ModelForm[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ("fleet", "name", "role", "agent")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        fleet, agent = data.get("fleet"), data.get("agent")
        if fleet and agent and agent.fleet_id != fleet.pk:
            self.add_error("agent", "This agent is in another fleet.")
        live = ApiToken.objects.filter(fleet=fleet, name=data.get("name"), revoked_at=None)
        if fleet and live.exists():
            self.add_error("name", "This fleet already has a live token with this name.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """Issue (the secret is shown once, in a message) and revoke; tokens are never edited."""

    form = ApiTokenForm
    list_display = (
        "name",
        "fleet",
        "role",
        "agent",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("fleet", "role")
    search_fields = ("name", "prefix")
    list_select_related = ("fleet", "agent")
    raw_id_fields = ("agent",)
    actions = ("revoke_selected",)

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ()
        return (
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

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        return self.get_readonly_fields(request, obj) or ("fleet", "name", "role", "agent")

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # revoke instead: the row is the audit trail of the credential

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            return
        issued = tokens.issue_token(
            obj.fleet, role=obj.role, name=obj.name, agent=obj.agent, by=request.user
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

    @admin.action(description="Revoke selected tokens")
    def revoke_selected(self, request: HttpRequest, qs: QuerySet[ApiToken]) -> None:
        done = sum(tokens.revoke_token(t, by=request.user) for t in qs.select_related("fleet"))
        self.message_user(request, f"Revoked {done}; {qs.count() - done} already were.")
