"""Admin pages for coordination data: browse and correct; state changes go through domain code."""

from __future__ import annotations

from django.contrib import admin

from fleet.models import Activity, Agent, Fleet, FleetModerator, Handoff, Lease, Session


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
