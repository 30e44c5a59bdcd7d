"""The moderation admin: the review queue, the per-claim review page, bulk decisions.

Nothing in the admin writes a claim: the change form is view-only for everyone (status,
scope and promotion are never form fields), and every button calls claims.moderation,
whose promotion gate decides. Moderators see only the fleets they are granted
(claims.admin_scope); another fleet's claim is simply not in their queryset.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.postgres.aggregates import JSONBAgg
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import JSONObject
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from claims import (
    admin_filters,
    admin_forms,
    admin_health,
    admin_scope,
    admin_views,
    contradictions,
    review,
    tallies,
)
from claims.admin_release import ReleaseAction
from claims.models import Claim, ClaimEvent, Evidence
from fleet import screen_view
from fleet.admin import ReadOnly
from fleet.reveal import has_hidden, reveal
from mcp_bridge.contract import sanitize, screen

QUEUE_FILTERS = (
    admin_filters.FleetFilter,
    admin_filters.SourceFilter,
    "type",
    admin_filters.SubjectFilter,
    admin_filters.SessionsFilter,
    admin_filters.AgeFilter,
    admin_filters.ScreenFilter,
)
QUEUE_COLUMNS = (
    "public_id",
    "queue_text",
    "screen",
    "source",
    "group",
    "near",
    "type",
    "subject_text",
    "fleet",
    "sessions",
    "proposer",
    "waiting",
)


# The site is ctxlake's, not "Django administration"; the index opens with the review queue.
admin.site.site_header = "ctxlake"
admin.site.site_title = "ctxlake"
admin.site.index_title = "Fleets, coordination and memory"
admin.site.index_template = "admin/ctxlake_index.html"

# Oldest first, nobody waits forever — group by group: a claim's likely duplicates sit
# with it (claims.review.GROUP_ORDERING).
QUEUE_ORDERING = review.GROUP_ORDERING
ALL_ORDERING = ("-created_at", "-pk")


def in_queue(request: HttpRequest) -> bool:
    return getattr(request, "review_queue", False)


class ClaimChangeList(ChangeList):
    """Column arrows follow the per-request ordering (queue: oldest first), not Meta's."""

    def __init__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> None:
        self.queue = in_queue(request)
        super().__init__(request, *args, **kwargs)

    def _get_default_ordering(self) -> list[Any]:
        return list(QUEUE_ORDERING if self.queue else ALL_ORDERING)

    def get_results(self, request: HttpRequest) -> None:
        """The page's rows, each queue row with its group's figures (claims.review
        .groups_of: a fixed number of queries for the whole page, none per row)."""
        super().get_results(request)
        if not self.queue:
            return
        rows = list(self.result_list)  # evaluates (and caches) the page once
        groups = review.groups_of(rows)
        for claim in rows:
            claim.queue_group = groups.get(review.group_root(claim))


class ModeratorOnly(ReadOnly):
    """Moderators may view (scoped); nobody adds, changes or deletes through forms."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return admin_scope.is_moderator(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin_scope.is_moderator(request.user)


def with_excerpt_flags(qs: QuerySet[Claim]) -> QuerySet[Claim]:
    """Each claim with its flagged excerpts' verdicts ([{flags, released}] or None), in
    one subquery, so the screen column costs no query per row."""
    flagged = (
        Evidence.objects.filter(claim_id=OuterRef("pk"))
        .exclude(screen_flags={})
        .order_by()
        .values("claim_id")
        .annotate(all=JSONBAgg(JSONObject(flags="screen_flags", released="screen_released_at")))
        .values("all")
    )
    return qs.annotate(excerpt_flags=Subquery(flagged))


def usefulness_context(claim: Claim) -> dict[str, Any]:
    """The review page's usefulness panel: the tallies, why the claim ranks as it does,
    agents' feedback (open first) and the promoted claims it contradicts."""
    return {
        "why": tallies.why(claim),
        "feedback": list(claim.feedback.select_related("agent", "session", "resolved_by")
                         .order_by("-resolution", "-created_at")[:50]),
        "contradictions": [
            (pair, pair.other if pair.claim_id == claim.pk else pair.claim)
            for pair in contradictions.open_pairs(claim.fleet)
            if claim.pk in (pair.claim_id, pair.other_id)],
        "confidence_form": admin_forms.ConfidenceForm(
            initial={"confidence": claim.confidence_set}, auto_id="confidence_%s"),
    }


@admin.register(Claim)
class ClaimAdmin(ReleaseAction, ModeratorOnly, admin.ModelAdmin[Claim]):
    list_display = (
        "public_id",
        "queue_text",
        "screen",
        "status",
        "contested_mark",
        "type",
        "subject",
        "fleet",
        "waiting",
    )
    list_display_links = ("public_id",)
    list_filter = (
        admin_filters.FleetFilter, "status", "contested", "type", admin_filters.ScreenFilter
    )
    search_fields = ("text", "subject")
    list_per_page = 50
    actions = ("promote_selected", "reject_selected", "release_selected")
    fields = ("text", "type", "subject", "status", "scope", "contested", "confidence")
    change_form_template = "admin/claims/claim/review.html"
    change_list_template = "admin/claims/claim/change_list.html"

    # Scope ------------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Claim]:
        qs = admin_scope.visible_claims(Claim.objects.all(), request.user)
        if in_queue(request):
            # The queue sorts every proposed row by its group (a window over all of them):
            # the labelled claims, shown by id only, are fetched for the page once it is
            # cut rather than joined into every row before the sort (a third of its time).
            near = Prefetch("near_claim", Claim.objects.only("pk", "fleet_id", "number"))
            qs = qs.proposed().select_related("fleet", "proposed_by").prefetch_related(near)
            return with_excerpt_flags(qs.defer("embedding", "search_vector"))
        return with_excerpt_flags(qs.select_related("fleet", "proposed_by", "near_claim").defer(
            "embedding", "search_vector", "near_claim__embedding", "near_claim__search_vector"
        ))

    def get_ordering(self, request: HttpRequest) -> tuple[Any, ...]:
        return QUEUE_ORDERING if in_queue(request) else ALL_ORDERING

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ClaimChangeList

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        return QUEUE_COLUMNS if in_queue(request) else tuple(self.list_display)

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        return QUEUE_FILTERS if in_queue(request) else tuple(self.list_filter)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Claim], search_term: str
    ) -> tuple[QuerySet[Claim], bool]:
        """Text search, plus a public id (cc-12) finding its claim directly."""
        found, may_duplicate = super().get_search_results(request, queryset, search_term)
        by_id = queryset.by_public_id(search_term) if search_term else queryset.none()  # type: ignore[attr-defined]
        return found | by_id, may_duplicate

    # Columns ----------------------------------------------------------------------------

    @admin.display(description="id", ordering="number")
    def public_id(self, claim: Claim) -> str:
        return claim.public_id

    @admin.display(description="text")
    def queue_text(self, claim: Claim) -> str:
        text = claim.text if len(claim.text) <= 120 else claim.text[:119] + "…"
        return reveal(text)

    @admin.display(description="screen")
    def screen(self, claim: Claim) -> SafeString:
        """⚠ while the text or an excerpt is withheld from agents; "released" after."""
        flags, pending = dict(claim.screen_flags), claim.screen_pending
        for n, excerpt in enumerate(getattr(claim, "excerpt_flags", None) or []):
            flags[f"evidence {n}"] = excerpt["flags"].get("excerpt", [])
            pending |= excerpt["released"] is None
        return screen_view.badge(flags, pending=pending)

    @admin.display(description="source", ordering="extractor")
    def source(self, claim: Claim) -> str:
        """Where the proposal came from: an agent's own call, or the transcript capture."""
        if not claim.extractor:
            return "agent"
        return format_html(
            '<span class="cl-captured" title="{}">captured · {}</span>',
            "a candidate the transcript capture extracted from a session",
            claim.extractor,
        )

    @admin.display(description="group")
    def group(self, claim: Claim) -> str:
        """ "3 proposals · 2 sessions" when others are labelled likely duplicates of the
        same claim; sessions are the independent verified ones among all their evidence."""
        found = getattr(claim, "queue_group", None)
        if found is None:
            return ""
        root = found.root_claim
        title = f"{root.public_id} and its likely duplicates" if root else "likely duplicates"
        return format_html('<span class="cl-group" title="{}">{}</span>', title, found.label)

    @admin.display(description="near", ordering="-near_similarity")
    def near(self, claim: Claim) -> str:
        """The queue's label: "likely duplicate of cc-12 (0.97)", "possible conflict with…"."""
        if not claim.near_relation or claim.near_claim is None:
            return ""
        said = (
            "possible conflict with"
            if claim.near_relation == "conflict"
            else ("likely duplicate of")
        )
        text = f"{said} {claim.near_claim.public_id}"
        if claim.near_similarity is not None:
            text += f" ({claim.near_similarity:.2f})"
        return format_html('<span class="cl-near {}">{}</span>', claim.near_relation, text)

    @admin.display(description="contested", ordering="contested")
    def contested_mark(self, claim: Claim) -> str:
        """A neutral flag when contested, nothing otherwise (not a red ✗ for "no")."""
        if not claim.contested:
            return ""
        return format_html('<span class="cl-flag" title="{}">⚑ {}</span>', "contested", "contested")

    @admin.display(description="subject", ordering="subject")
    def subject_text(self, claim: Claim) -> str:
        return reveal(claim.subject)

    @admin.display(description="ind. sessions", ordering="independent_sessions")
    def sessions(self, claim: Claim) -> str:
        need = claim.fleet.min_independent_sessions
        have = claim.independent_sessions
        return f"{have}" if have >= need else f"{have} (needs {need})"

    @admin.display(description="by", ordering="proposed_by__agent_id")
    def proposer(self, claim: Claim) -> str:
        return claim.proposed_by.agent_id if claim.proposed_by else "—"

    @admin.display(description="waiting", ordering="created_at")
    def waiting(self, claim: Claim) -> str:
        return timesince(claim.created_at, timezone.now())

    # Views ------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("review/", wrap(self.review_queue_view), name="claims_claim_review"),
            path("health/", wrap(self.health_view), name="claims_claim_health"),
            path(
                "<path:object_id>/moderate/<slug:action>/",
                wrap(self.moderate_view),
                name="claims_claim_moderate",
            ),
            *super().get_urls(),
        ]

    def health_view(self, request: HttpRequest) -> HttpResponse:
        """Memory health (claims.admin_health): claims to look at again, bulk actions."""
        if not self.has_moderate_permission(request):
            raise Http404("Memory health is for moderators.")
        return admin_health.health_view(self, request)

    def review_queue_view(self, request: HttpRequest) -> HttpResponse:
        """The changelist, narrowed to proposed claims, oldest first, with queue filters."""
        request.review_queue = True  # type: ignore[attr-defined]
        return self.changelist_view(request, {"title": "Review queue", "review_queue": True})

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {"title": "All claims", **(extra_context or {})}
        return super().changelist_view(request, context)

    def moderate_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """One button of the review page: POST only, on a claim this moderator can see."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        handler = admin_views.HANDLERS.get(action)
        claim = self.get_object(request, unquote(object_id))
        if handler is None or claim is None or not self.has_view_permission(request, claim):
            raise Http404("No such claim here.")  # another fleet's claim looks absent
        response = handler(self, request, claim)
        if request.POST.get("triage") != "1":
            return response
        # The queue's keyboard triage posts in the background: the same handler, the same
        # messages, answered as JSON instead of a redirect.
        said = [(m.level_tag, str(m)) for m in messages.get_messages(request)]
        ok = bool(said) and all(tag == "success" for tag, _ in said)
        return JsonResponse({"ok": ok, "messages": [text for _, text in said]})

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        claim = self.get_object(request, unquote(object_id))
        if claim is not None and request.method == "GET":
            extra_context = {**(extra_context or {}), **self.review_context(claim)}
        return super().change_view(request, object_id, form_url, extra_context)

    def review_context(self, claim: Claim) -> dict[str, Any]:
        facts = review.review_of(claim)
        live = claim.status == Claim.Status.PROPOSED
        spans = claim.screen_flags.get("text")
        return {
            "title": f"Review {claim.public_id}",
            "subtitle": None,  # str(claim) would put agent-written text in the <title>
            "review": facts,
            "text_html": screen_view.marked(claim.text, spans) if spans else reveal(claim.text),
            **self.screen_context(claim, facts),
            "agents_see": sanitize.clean_text(claim.text) if has_hidden(claim.text) else None,
            "can_decide": live,
            "can_contest": claim.status == Claim.Status.PROMOTED,
            "is_live": claim.status in (Claim.Status.PROPOSED, Claim.Status.PROMOTED),
            "promote_form": admin_forms.PromoteForm(auto_id="promote_%s"),
            "reject_form": admin_forms.RejectForm(auto_id="reject_%s"),
            # The suggested wording is what agents would see: hidden code points removed.
            "edit_form": admin_forms.EditForm(
                initial={"text": sanitize.clean_text(claim.text, len(claim.text))},
                auto_id="edit_%s",
            ),
            "merge_form": admin_forms.MergeForm(claim=claim, auto_id="merge_%s"),
            "contest_form": admin_forms.NoteForm(auto_id="contest_%s"),
            "retract_form": admin_forms.NoteForm(auto_id="retract_%s"),
            "is_promoted": claim.status == Claim.Status.PROMOTED,
            "supersede_form": admin_forms.OtherClaimForm(claim=claim, auto_id="supersede_%s"),
            "valid_until_form": admin_forms.ValidUntilForm(
                initial={"valid_until": claim.valid_until}, auto_id="valid_until_%s"
            ),
            **usefulness_context(claim),
        }

    def screen_context(self, claim: Claim, facts: review.Review) -> dict[str, Any]:
        """The screen panel: what is flagged (the claim and its excerpts, released as one),
        whether it still waits for a person, and the row that says who released it."""
        rows = [r for r in (claim, *(c.evidence for c in facts.evidence)) if r.screen_flags]
        author = claim.proposed_by.agent_id if claim.proposed_by else None
        flags = {f"{n} {f}": v for n, r in enumerate(rows) for f, v in r.screen_flags.items()}
        return {
            "screen_rows": rows,
            "screen_pending": any(r.screen_pending for r in rows),
            "screen_released": next((r for r in rows if r.screen_released_at), None),
            "screen_reasons": screen.reasons(flags),
            "withheld_marker": screen.withheld(author),
            "release_form": admin_forms.ReleaseForm(auto_id="release_%s"),
        }

    # Bulk actions -----------------------------------------------------------------------

    def has_moderate_permission(self, request: HttpRequest) -> bool:
        return admin_scope.is_moderator(request.user)

    @admin.action(description="Promote selected claims…", permissions=["moderate"])
    def promote_selected(
        self, request: HttpRequest, queryset: QuerySet[Claim]
    ) -> TemplateResponse | None:
        return admin_views.bulk(self, request, queryset, verb="promote")

    @admin.action(description="Reject selected claims…", permissions=["moderate"])
    def reject_selected(
        self, request: HttpRequest, queryset: QuerySet[Claim]
    ) -> TemplateResponse | None:
        return admin_views.bulk(self, request, queryset, verb="reject")


@admin.register(ClaimEvent)
class ClaimEventAdmin(ModeratorOnly, admin.ModelAdmin[ClaimEvent]):
    """The audit trail, read-only, limited to the moderator's fleets."""

    list_display = ("at", "claim_id_display", "kind", "actor_user", "actor_agent", "note")
    list_filter = ("kind",)
    list_select_related = ("claim", "actor_user", "actor_agent")
    search_fields = ("note",)

    @admin.display(description="claim", ordering="claim__number")
    def claim_id_display(self, event: ClaimEvent) -> str:
        return event.claim.public_id

    def get_queryset(self, request: HttpRequest) -> QuerySet[ClaimEvent]:
        qs = super().get_queryset(request).defer("claim__embedding", "claim__search_vector")
        return admin_scope.visible(qs, request.user, fleet_field="claim__fleet")
