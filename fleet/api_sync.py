"""Remote sync: serve a fleet's rendered cache files and take its agents' spool lines.

An agent host that is not the server runs the bridge against a local copy of the cache:
it GETs cache/manifest (every file's ETag), fetches the files whose ETag changed
(If-None-Match → 304 otherwise), writing manifest.json last, and POSTs its spool lines.
The files are the fleet's latest render as stored in the database (fleet.artifacts), not
this web host's disk, so every web host serves the same render with the same ETags
(the content's sha256). Only the fixed file names of the cache contract are served.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from fleet import api_spool, artifact_store, artifacts, tokens
from fleet.api_parsers import NDJSONParser
from fleet.models import ApiToken, Fleet
from fleet.permissions import RELAY, SYNC, FleetRequest
from fleet.views import FLEET_PARAM, FleetViewSet
from mcp_bridge import contract

log = logging.getLogger(__name__)

CONTENT_TYPES = {
    contract.MANIFEST: "application/json",
    contract.ROSTER: "application/json",
    contract.HISTORY: "application/json",
    contract.HANDOFFS: "application/json",
    contract.SNAPSHOT: "application/vnd.sqlite3",
    contract.BRIEFING: "text/markdown; charset=utf-8",
}


def _not_modified(request: Request, etag: str) -> bool:
    wanted = request.headers.get("If-None-Match", "")
    return wanted.strip() == "*" or etag in [t.strip() for t in wanted.split(",")]


class CacheFileSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    size = serializers.IntegerField()
    etag = serializers.CharField()
    content_type = serializers.CharField()


class CacheIndexSerializer(serializers.Serializer[Any]):
    manifest = serializers.DictField(allow_null=True, help_text="manifest.json, parsed.")
    files = CacheFileSerializer(many=True)
    note = serializers.CharField(allow_blank=True)


class SpoolResultSerializer(serializers.Serializer[Any]):
    class Rejected(serializers.Serializer[Any]):
        id = serializers.CharField(allow_null=True)
        line = serializers.IntegerField(allow_null=True)
        reason = serializers.CharField()

    accepted = serializers.ListField(child=serializers.CharField())
    rejected = Rejected(many=True)


@extend_schema(tags=["sync"], parameters=[FLEET_PARAM])
class CacheViewSet(FleetViewSet):
    roles = {"manifest": SYNC, "file": SYNC, "delta": SYNC}
    serializer_class = CacheIndexSerializer
    pagination_class = None

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        return super().perform_content_negotiation(request, force=True)  # files, not formats

    @extend_schema(
        summary="The rendered cache: manifest.json and every file's size and ETag",
        responses={200: CacheIndexSerializer, 304: OpenApiResponse(description="Not modified")},
    )
    def manifest(self, request: FleetRequest, fleet: str) -> HttpResponseBase:
        etag, files = served_listing(request.fleet)
        if files and _not_modified(request, etag):
            return HttpResponse(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        listed = {f["name"]: f["etag"] for f in files}
        stored = _latest(request.fleet, contract.MANIFEST, listed.get(contract.MANIFEST))
        manifest = _read_json(stored[1]) if stored else None
        note = "" if manifest is not None else "no manifest rendered yet"
        body = CacheIndexSerializer({"manifest": manifest, "files": files, "note": note}).data
        return Response(body, headers={"ETag": etag, "Cache-Control": "no-cache"})

    @extend_schema(
        summary="One rendered cache file, by its fixed name (ETag / If-None-Match)",
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            (200, "text/markdown"): OpenApiTypes.STR,
            (200, "application/vnd.sqlite3"): OpenApiTypes.BINARY,
            304: OpenApiResponse(description="Not modified"),
        },
    )
    def file(self, request: FleetRequest, fleet: str, name: str) -> HttpResponseBase:
        if name not in CONTENT_TYPES:
            raise exceptions.NotFound(f"Cache files are: {', '.join(CONTENT_TYPES)}.")
        etag = artifacts.etag(request.fleet, name)  # a 304 never reads the body
        if etag is not None and _not_modified(request, etag):
            return HttpResponse(status=status.HTTP_304_NOT_MODIFIED,
                                headers={"ETag": etag, "Cache-Control": "no-cache"})
        stored = _latest(request.fleet, name, etag)
        if stored is None:
            raise exceptions.NotFound(f"{name} has not been rendered yet.")
        etag, body = stored
        headers = {"ETag": etag, "Cache-Control": "no-cache"}
        if _not_modified(request, etag):
            return HttpResponse(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
        return HttpResponse(body, content_type=CONTENT_TYPES[name], headers=headers)

    @extend_schema(
        summary="The snapshot's changes since a version the host holds (one merged delta)",
        description=(
            "`since` is the `snapshot_version` in the host's snapshot.sqlite meta. 200: a "
            "delta (docs/cache-format.md, Snapshot deltas) to the latest render; 304: "
            "`since` is the latest; 404: not all deltas since then are kept, or no such "
            "version (download snapshot.sqlite whole)."
        ),
        parameters=[OpenApiParameter("since", int, required=True)],
        responses={
            (200, "application/json"): OpenApiTypes.OBJECT,
            304: OpenApiResponse(description="Up to date"),
            404: OpenApiResponse(description="Download snapshot.sqlite in full"),
        },
    )
    def delta(self, request: FleetRequest, fleet: str) -> HttpResponseBase:
        since = request.query_params.get("since", "")
        if not since.isdigit() or len(since) > 18:
            raise exceptions.ValidationError({"since": ["A snapshot version (an integer)."]})
        body = artifacts.snapshot_delta(request.fleet, int(since))
        if body is None:
            raise exceptions.NotFound(f"No delta from version {since} is kept; download "
                                      f"{contract.SNAPSHOT} in full.")
        if not body:
            return HttpResponse(status=status.HTTP_304_NOT_MODIFIED)
        return HttpResponse(body, content_type="application/json",
                            headers={"Cache-Control": "no-cache"})


class StoreUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The rendered file could not be read from the object store; try again."
    default_code = "store_unavailable"


def served_listing(fleet: Fleet) -> tuple[str, list[dict[str, Any]]]:
    """(ETag, files) of GET cache/manifest: every served file of the latest render with its
    size and ETag. `changes` sends the same with a new version, saving the host that GET."""
    files = [
        {"name": f.name, "size": f.size, "etag": f.etag, "content_type": CONTENT_TYPES[f.name]}
        for f in artifacts.listing(fleet)
        if f.name in CONTENT_TYPES
    ]
    return '"' + hashlib.sha256(repr(files).encode()).hexdigest()[:32] + '"', files


def _latest(fleet: Fleet, name: str, etag: str | None = None) -> tuple[str, bytes] | None:
    """(ETag, body) of the file's latest render (artifacts.latest: no query when this
    process has read the body of `etag`, the ETag just read as its latest). A failing
    object store is answered 503 (the details are logged, not sent: the client can only
    retry)."""
    try:
        return artifacts.latest(fleet, name, listed=etag)
    except artifact_store.StoreError as e:
        log.warning("GET cache/%s of fleet %s: %s", name, fleet.slug, e)
        raise StoreUnavailable() from e


def _read_json(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@extend_schema(tags=["sync"], parameters=[FLEET_PARAM])
class SpoolViewSet(FleetViewSet):
    roles = {"upload": RELAY}
    serializer_class = SpoolResultSerializer
    parser_classes = [NDJSONParser]
    pagination_class = None

    @extend_schema(
        summary="Upload spool lines (NDJSON, the bridge's format); idempotent by event id",
        description=(
            "Each line is checked against the spool contract, scrubbed of secrets and queued "
            "for the drain. The answer lists the accepted event ids (including ids sent "
            "before) and the rejected lines with a reason; 400 when no line was accepted. "
            "Each line names its agent: an agent token may name only its own, a host token "
            "only the agents registered for it (per line: the others are still accepted). "
            "At most "
            f"{api_spool.MAX_LINES} lines per request."
        ),
        request={"application/x-ndjson": OpenApiTypes.STR},
        responses={200: SpoolResultSerializer, 400: SpoolResultSerializer},
        examples=[
            OpenApiExample(
                "one line",
                '{"v":1,"id":"0b6f2f0e-3f0a-4a8e-9d7b-2d8f5f1c9a10","kind":"lease.claim",'
                '"fleet":"acme","agent":"ada","session":"s-42","at":"2026-01-01T00:00:00Z",'
                '"payload":{"paths":["src/**"],"reason":"refactor","ttl_secs":1800}}',
                request_only=True,
            ),
            OpenApiExample(
                "answer",
                {"accepted": ["0b6f2f0e-3f0a-4a8e-9d7b-2d8f5f1c9a10"], "rejected": []},
                response_only=True,
            ),
        ],
    )
    def upload(self, request: FleetRequest, fleet: str) -> Response:
        lines = request.data if isinstance(request.data, list) else []
        if len(lines) > api_spool.MAX_LINES:
            raise exceptions.ValidationError(
                {"lines": [f"At most {api_spool.MAX_LINES} lines per request."]}
            )
        token = request.auth if isinstance(request.auth, ApiToken) else None
        try:
            outcome = api_spool.receive(request.fleet, lines, speakers=tokens.speakers(token))
        except api_spool.InboxFull as exc:
            return Response(
                {"detail": str(exc)},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": "30"},
            )
        # Nothing admitted at all is the caller's error (400); a partly admitted batch is
        # 200, its rejected lines listed, so a sync can drop them and keep the rest.
        code = 400 if outcome.rejected and not outcome.accepted else 200
        return Response(SpoolResultSerializer(outcome).data, status=code)
