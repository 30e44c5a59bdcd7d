"""`GET /api/v1/fleets/<fleet>/export`: the fleet's export as a tar, for operator tokens.

The same archive `manage.py export_fleet` writes (ctxlake_site.fleet_export), streamed
member by member. Operator-only (FleetScoped: another fleet's token gets 404, an agent or
integration token 403): the export holds every agent's text, flagged or not. It lives in
ctxlake_site, not fleet/, because it reads claims too.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request

from ctxlake_site.fleet_export import archive
from fleet.permissions import MODERATE, FleetRequest
from fleet.views import FLEET_PARAM, FleetViewSet

TAR = "application/x-tar"


class ExportQuery(serializers.Serializer[Any]):
    with_vectors = serializers.BooleanField(default=False)


@extend_schema(tags=["export"], parameters=[FLEET_PARAM])
class ExportViewSet(FleetViewSet):
    roles = {"export": MODERATE}
    serializer_class = ExportQuery
    pagination_class = None

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)  # a tar, not formats

    @extend_schema(
        summary="The fleet's export (JSONL, manifest.json, memory.md) as a tar; operators only",
        description="The archive `manage.py export_fleet` writes, streamed member by member: "
        "the fleet's settings, agents, sessions, handoffs, claims with evidence and events, "
        "a manifest with counts and sha256s, and memory.md. No token or password hash.",
        parameters=[OpenApiParameter("with_vectors", bool, OpenApiParameter.QUERY,
                                     description="Also include the claims' embeddings.")],
        responses={(200, TAR): OpenApiTypes.BINARY},
    )
    def export(self, request: FleetRequest, fleet: str) -> StreamingHttpResponse:
        query = ExportQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        built = archive.build(request.fleet, with_vectors=query.validated_data["with_vectors"])
        name = f"{request.fleet.slug}-export.tar"
        return StreamingHttpResponse(
            archive.tar_chunks(built), content_type=TAR,
            headers={"Content-Disposition": f'attachment; filename="{name}"',
                     "Cache-Control": "no-store"})
