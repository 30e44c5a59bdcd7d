"""Review-queue filters: fleet (only granted ones), source, subject, independent sessions,
age, screen.

Each filter's choices come from what the moderator may see, never from all fleets: a
filter listing another fleet's name or subjects would leak it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, F, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from claims import admin_scope, release
from claims.models import Claim
from fleet import admin_screen as fleet_admin_screen

TOP_SUBJECTS = 15


class FleetFilter(admin.SimpleListFilter):
    title = "fleet"
    parameter_name = "fleet"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        fleets = admin_scope.granted_fleets(request.user).only("pk", "slug")
        return [(str(f.pk), f.slug) for f in fleets]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        # A forged id is harmless: the queryset is already limited to granted fleets.
        return queryset.filter(fleet_id=int(value)) if value.isdigit() else queryset.none()


class SourceFilter(admin.SimpleListFilter):
    """An agent's own proposal, or a candidate the transcript capture extracted (any
    extractor, or one: the contract's list, so a new extractor appears by itself)."""

    title = "source"
    parameter_name = "source"
    AGENT, CAPTURED = "agent", "captured"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        extractors = [value for value in Claim.Extractor.values if value]
        return [
            (self.AGENT, "agent's own"),
            (self.CAPTURED, "captured, any extractor"),
            *((value, f"captured · {value}") for value in extractors),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case None:
                return queryset
            case self.AGENT:
                return queryset.filter(extractor="")
            case self.CAPTURED:
                return queryset.exclude(extractor="")
            case value if value in Claim.Extractor.values:
                return queryset.filter(extractor=value)
        return queryset.none()  # a forged value matches nothing


class SubjectFilter(admin.SimpleListFilter):
    """The most common subjects among the rows in view; any subject works via the URL."""

    title = "subject"
    parameter_name = "subject"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        top = (
            model_admin.get_queryset(request)
            .order_by()
            .values("subject")
            .annotate(n=Count("pk"))
            .order_by("-n", "subject")[:TOP_SUBJECTS]
        )
        choices = [(row["subject"], f"{row['subject']} ({row['n']})") for row in top]
        current = self.value()
        if current and current not in {value for value, _ in choices}:
            choices.append((current, current))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(subject=value) if value else queryset


class SessionsFilter(admin.SimpleListFilter):
    title = "independent sessions"
    parameter_name = "sessions"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("short", "short of the fleet's minimum"),
            ("enough", "meets the fleet's minimum"),
            ("1", "1"),
            ("2", "2"),
            ("3+", "3 or more"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        minimum = F("fleet__min_independent_sessions")
        match self.value():
            case "short":
                return queryset.filter(independent_sessions__lt=minimum)
            case "enough":
                return queryset.filter(independent_sessions__gte=minimum)
            case "1" | "2" as n:
                return queryset.filter(independent_sessions=int(n))
            case "3+":
                return queryset.filter(independent_sessions__gte=3)
        return queryset


class AgeFilter(admin.SimpleListFilter):
    """How long a claim has waited; the queue is oldest first, this narrows it."""

    title = "age"
    parameter_name = "age"
    BUCKETS = {
        "day": (None, timedelta(days=1), "less than a day"),
        "week": (timedelta(days=1), timedelta(days=7), "1–7 days"),
        "month": (timedelta(days=7), timedelta(days=30), "1–4 weeks"),
        "older": (timedelta(days=30), None, "over 30 days"),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, label) for key, (_, _, label) in self.BUCKETS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        bucket = self.BUCKETS.get(self.value() or "")
        if bucket is None:
            return queryset
        at_least, under, _ = bucket
        now = timezone.now()
        if at_least is not None:
            queryset = queryset.filter(created_at__lte=now - at_least)
        if under is not None:
            queryset = queryset.filter(created_at__gt=now - under)
        return queryset


class ScreenFilter(fleet_admin_screen.ScreenFilter):
    """screen: flagged / released / clean, reading a claim with its evidence's excerpts
    (claims.release.claims_in_state: the same rule the release follows)."""

    def in_state(self, queryset: QuerySet[Any], state: str) -> QuerySet[Any]:
        return release.claims_in_state(queryset, state)
