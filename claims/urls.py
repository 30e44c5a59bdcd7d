"""Memory routes under /api/v1/fleets/<fleet>/."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpResponseBase
from django.urls import path

from claims import release_views, views

app_name = "claims-api"


def _action(name: str) -> Callable[..., HttpResponseBase]:
    return views.ClaimViewSet.as_view({"post": name})


urlpatterns = [
    path(
        "claims",
        views.ClaimViewSet.as_view({"get": "list", "post": "propose"}),
        name="claims",
    ),
    path("claims/search", views.ClaimViewSet.as_view({"get": "search"}), name="claim-search"),
    path("claims/<str:claim_id>", views.ClaimViewSet.as_view({"get": "retrieve"}), name="claim"),
    path("claims/<str:claim_id>/promote", _action("promote"), name="claim-promote"),
    path("claims/<str:claim_id>/reject", _action("reject"), name="claim-reject"),
    path("claims/<str:claim_id>/contest", _action("contest"), name="claim-contest"),
    path("claims/<str:claim_id>/retract", _action("retract"), name="claim-retract"),
    path("claims/<str:claim_id>/supersede", _action("supersede"), name="claim-supersede"),
    path("claims/<str:claim_id>/valid-until", _action("valid_until"), name="claim-valid-until"),
    path("claims/<str:claim_id>/merge", _action("merge"), name="claim-merge"),
    path("claims/<str:claim_id>/feedback", _action("feedback"), name="claim-feedback"),
    path("timeline", views.TimelineViewSet.as_view({"get": "list"}), name="timeline"),
    path("screen/flagged", release_views.ScreenViewSet.as_view({"get": "flagged"}),
         name="screen-flagged"),
    path("screen/release", release_views.ScreenViewSet.as_view({"post": "release"}),
         name="screen-release"),
]
