"""Admin pages for claims. Status is never editable here: moderation goes through
claims.moderation (the promotion gate), which the moderation issue wires into actions."""

from __future__ import annotations

from django.contrib import admin

from claims.models import Claim, ClaimEvent, Evidence


class EvidenceInline(admin.TabularInline[Evidence, Claim]):
    model = Evidence
    extra = 0
    fields = ("session_id", "message_id", "repo", "path", "commit", "excerpt")


class ClaimEventInline(admin.TabularInline[ClaimEvent, Claim]):
    model = ClaimEvent
    extra = 0
    can_delete = False
    fields = ("at", "kind", "actor_user", "actor_agent", "note")
    readonly_fields = fields

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin[Claim]):
    list_display = ("public_id", "short_text", "fleet", "type", "subject", "status", "created_at")
    list_filter = ("status", "type", "fleet", "contested")
    search_fields = ("text", "subject")
    list_select_related = ("fleet",)
    readonly_fields = (
        "status",
        "scope",
        "contested",
        "independent_sessions",
        "embedding_model",
        "promoted_at",
        "promoted_by",
    )
    exclude = ("embedding",)
    raw_id_fields = ("proposed_by", "superseded_by")
    inlines = (EvidenceInline, ClaimEventInline)

    @admin.display(description="text")
    def short_text(self, claim: Claim) -> str:
        return claim.text if len(claim.text) <= 80 else claim.text[:79] + "…"


@admin.register(ClaimEvent)
class ClaimEventAdmin(admin.ModelAdmin[ClaimEvent]):
    list_display = ("at", "claim", "kind", "actor_user", "actor_agent")
    list_filter = ("kind",)
    list_select_related = ("claim", "actor_user", "actor_agent")

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False
