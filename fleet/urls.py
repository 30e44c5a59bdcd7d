"""Coordination routes under /api/v1/fleets/<fleet>/ (claims/urls.py adds the memory ones)."""

from __future__ import annotations

from django.urls import path

from fleet import api_changes, api_sync, views

app_name = "fleet-api"

urlpatterns = [
    path("status", views.StatusViewSet.as_view({"get": "status"}), name="status"),
    path("agents", views.AgentViewSet.as_view({"get": "list"}), name="agents"),
    path(
        "agents/heartbeat",
        views.AgentViewSet.as_view({"post": "heartbeat"}),
        name="agent-heartbeat",
    ),
    path(
        "sessions",
        views.SessionViewSet.as_view({"get": "list", "post": "start"}),
        name="sessions",
    ),
    path(
        "sessions/<str:session_id>",
        views.SessionViewSet.as_view({"get": "retrieve"}),
        name="session",
    ),
    path(
        "sessions/<str:session_id>/end",
        views.SessionViewSet.as_view({"post": "end"}),
        name="session-end",
    ),
    path("leases", views.LeaseViewSet.as_view({"get": "list"}), name="leases"),
    path("leases/claim", views.LeaseViewSet.as_view({"post": "claim"}), name="lease-claim"),
    path("leases/release", views.LeaseViewSet.as_view({"post": "release"}), name="lease-release"),
    path(
        "handoffs",
        views.HandoffViewSet.as_view({"get": "list", "post": "create"}),
        name="handoffs",
    ),
    path("handoffs/<str:pk>", views.HandoffViewSet.as_view({"get": "retrieve"}), name="handoff"),
    path(
        "handoffs/<str:pk>/pickup",
        views.HandoffViewSet.as_view({"post": "pickup"}),
        name="handoff-pickup",
    ),
    path(
        "handoffs/<str:pk>/clear",
        views.HandoffViewSet.as_view({"post": "clear"}),
        name="handoff-clear",
    ),
    path("incidents", views.IncidentViewSet.as_view({"get": "list"}), name="incidents"),
    path("cache/manifest", api_sync.CacheViewSet.as_view({"get": "manifest"}), name="cache"),
    path("cache/delta", api_sync.CacheViewSet.as_view({"get": "delta"}), name="cache-delta"),
    path(
        "cache/<str:name>",
        api_sync.CacheViewSet.as_view({"get": "file"}),
        name="cache-file",
    ),
    path("spool", api_sync.SpoolViewSet.as_view({"post": "upload"}), name="spool"),
    path("changes", api_changes.ChangesViewSet.as_view({"get": "changes"}), name="changes"),
]
