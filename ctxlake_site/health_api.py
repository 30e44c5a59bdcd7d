"""`GET /api/v1/health`: the pipeline reading (pipeline_status) for operators, over REST.

An operator token sees its own fleet's pipeline and the spool files of fleets that do not
exist (they belong to no fleet; seeing them is how an operator learns of a mistyped
CTXLAKE_FLEET_ID). A superuser's browser session sees every fleet. Other roles: 403.
The view lives here, not in fleet/, because it reads the whole site's pipeline.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ctxlake_site import pipeline_status
from fleet.models import ApiToken, Fleet


class OperatorOnly(BasePermission):
    def has_permission(self, request: Request, view: APIView) -> bool:
        if not request.user or not request.user.is_authenticated:
            raise exceptions.NotAuthenticated()
        token = request.auth
        if isinstance(token, ApiToken):
            if token.role != ApiToken.Role.OPERATOR:
                raise exceptions.PermissionDenied(f"A {token.role} token may not do this.")
            return True
        if not getattr(request.user, "is_superuser", False):
            raise exceptions.PermissionDenied("Operators and superusers only.")
        return True


class SpoolFileSerializer(serializers.Serializer[Any]):
    fleet = serializers.CharField(help_text="The fleet id the file is named after.")
    path = serializers.CharField()
    bytes = serializers.IntegerField()
    lines = serializers.IntegerField()
    modified = serializers.DateTimeField()


class FleetPipelineSerializer(serializers.Serializer[Any]):
    fleet = serializers.CharField()
    backlog_lines = serializers.IntegerField(help_text="Spool lines past the drain's cursor.")
    backlog_oldest = serializers.DateTimeField(allow_null=True)
    dead_letters = serializers.IntegerField()
    dead_newest_reason = serializers.CharField(allow_null=True)
    rejected = serializers.IntegerField(help_text="Lines a sync host's server refused.")
    rejected_newest_reason = serializers.CharField(allow_null=True)
    rendered_at = serializers.DateTimeField(allow_null=True)
    last_activity = serializers.DateTimeField(allow_null=True)
    cache_behind = serializers.BooleanField()
    render_queued = serializers.BooleanField()
    last_drain = serializers.DateTimeField(allow_null=True)
    problems = serializers.ListField(child=serializers.CharField())


class HealthSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=["ok", "warn"])
    fleets = FleetPipelineSerializer(many=True)
    quarantined = SpoolFileSerializer(many=True)
    waiting = SpoolFileSerializer(many=True, help_text="Unknown fleets' files not yet moved.")
    clusters = serializers.ListField(child=serializers.CharField())
    checked_at = serializers.DateTimeField()


class HealthView(APIView):
    permission_classes = [OperatorOnly]

    @extend_schema(
        operation_id="health",
        responses=HealthSerializer,
        description="The pipeline for operators: per fleet the spool backlog, dead letters, "
        "cache age and last drain; spool files of fleets that do not exist; worker heartbeat.",
    )
    def get(self, request: Request) -> Response:
        token = request.auth
        fleets = (Fleet.objects.filter(pk=token.fleet_id) if isinstance(token, ApiToken)
                  else Fleet.objects.all())
        reading = pipeline_status.overview(fleets=fleets)
        warn = (any(f.problems for f in reading.fleets) or reading.quarantined
                or reading.waiting or not reading.clusters)
        body = HealthSerializer({**vars(reading), "status": "warn" if warn else "ok"}).data
        return Response(body)
