"""GET /api/v1/fleets/<fleet>/changes: a long-poll that answers when the fleet's render changes.

`?after=<version>&wait=<secs>`: 200 `{"version": …}` at once when the fleet's latest render
is not `after` (or `after` is absent: how a host learns the version before its first pull),
else when one is announced within `wait` seconds; 204 when none was. A host pulls on 200,
and on 204 too if its interval is up, then asks again with the version it holds. A 200
carries the render's `listing` as GET cache/manifest would answer it, so the host's pull
starts with the changed files. A host that says which ETags it holds (`have=`) also gets
the bodies of the render's small text files it lacks (`files`, contract.INLINE_FILES, up to
INLINE_MAX_BYTES in all), so a render costs it no request but the next long-poll: at 50
hosts and a render a second, their 2-3 GETs per host were as many requests as the writes.
Too many waiting from one token, or in one server process: 429 with Retry-After, at once.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.validators import RegexValidator
from django.db import connection
from django.http import HttpResponse, HttpResponseBase
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from fleet import artifacts, change_feed
from fleet.api_sync import CacheFileSerializer, served_listing
from fleet.models import ApiToken, Fleet
from fleet.permissions import SYNC, FleetRequest
from fleet.views import FLEET_PARAM, FleetViewSet
from mcp_bridge import contract

log = logging.getLogger(__name__)

#: What a version looks like on the wire: printable ASCII, no space (a render's stamp).
VERSION_RE = r"\A[!-~]{1,128}\Z"
DEFAULT_WAIT_SECS = 25
#: The most bytes of file bodies one answer carries; files past it are left to GET.
INLINE_MAX_BYTES = 1 << 20
#: `have`: up to one ETag per cache file, comma-separated; empty when the host holds none.
_ETAG = contract.ETAG_RE.pattern
HAVE_RE = rf"\A({_ETAG}(,{_ETAG}){{0,{len(contract.CACHE_FILES)}}})?\Z"


class ChangesQuerySerializer(serializers.Serializer[Any]):
    after = serializers.CharField(
        required=False,
        max_length=128,
        validators=[RegexValidator(VERSION_RE, "A version is 1-128 printable ASCII characters.")],
        help_text="The version this host last saw (from a previous answer); absent: answer now.",
    )
    wait = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=change_feed.MAX_WAIT_SECS,
        default=DEFAULT_WAIT_SECS,
        help_text=f"Seconds to wait for a change, 0-{change_feed.MAX_WAIT_SECS}.",
    )
    have = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=(len(contract.CACHE_FILES) + 1) * (contract.ETAG_HEX + 3),
        validators=[RegexValidator(HAVE_RE, "Up to one ETag per cache file, comma-separated.")],
        help_text="The ETags of the cache files this host holds, comma-separated (empty: "
        "none). With it, a 200 carries the bodies of the small text files it lacks.",
    )


class ListingSerializer(serializers.Serializer[Any]):
    etag = serializers.CharField(help_text="The ETag GET cache/manifest would answer with.")
    files = CacheFileSerializer(many=True)


class ChangesSerializer(serializers.Serializer[Any]):
    version = serializers.CharField(help_text="The fleet's latest render version.")
    listing = ListingSerializer(
        required=False,
        help_text="What GET cache/manifest would answer now (files and their ETags), on a "
        "new version: the host fetches the changed files without asking for it.",
    )
    files = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text="With `have`: file name → the whole file (UTF-8 text) for the listed small "
        "text files whose ETag the host did not name, within a size budget; the host checks "
        "each against the listing's ETag and GETs any other.",
    )


@extend_schema(tags=["sync"], parameters=[FLEET_PARAM])
class ChangesViewSet(FleetViewSet):
    roles = {"changes": SYNC}
    serializer_class = ChangesSerializer
    pagination_class = None

    @extend_schema(
        summary="Wait (long-poll) until the fleet's rendered cache changes",
        parameters=[ChangesQuerySerializer],
        responses={
            200: ChangesSerializer,
            204: OpenApiResponse(description="No change within `wait` seconds"),
            429: OpenApiResponse(description="Too many long-polls waiting; see Retry-After"),
        },
    )
    def changes(self, request: FleetRequest, fleet: str) -> HttpResponseBase:
        query = ChangesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after: str | None = query.validated_data.get("after")
        have = query.validated_data.get("have")
        held = None if have is None else frozenset(filter(None, have.split(",")))
        slug = request.fleet.slug
        if after is None:
            return _changed(request, change_feed.current_version(slug), held)
        try:  # a place first (429 costs no query), then the read: see Feed.enter
            ticket = change_feed.FEED.enter(slug, _holder(request))
        except change_feed.Busy as busy:
            raise exceptions.Throttled(wait=busy.retry_after, detail=str(busy)) from None
        try:
            current = change_feed.current_version(slug)
            if current != after:
                return _changed(request, current, held)
            _release_database()
            new = change_feed.FEED.wait(ticket, after, timeout=query.validated_data["wait"])
        finally:
            change_feed.FEED.leave(ticket)
        if new is None:
            return HttpResponse(status=status.HTTP_204_NO_CONTENT)
        return _changed(request, new, held)


def _changed(request: FleetRequest, version: str, held: frozenset[str] | None) -> Response:
    """The version, with the listing read after it: of that render or a later one (a
    render's notice arrives after its COMMIT), so a host never fetches an older one; and,
    for a host that said what it `held`, the small files it lacks."""
    etag, files = served_listing(request.fleet)
    body: dict[str, Any] = {"version": version}
    if files:
        body["listing"] = {"etag": etag, "files": files}
        if held is not None and (inline := _inline(request.fleet, files, held)):
            body["files"] = inline
    return Response(body)


def _inline(fleet: Fleet, files: list[dict[str, Any]], held: frozenset[str]) -> dict[str, str]:
    """The listed INLINE_FILES whose ETag the host does not hold, as text, each in listing
    order if it still fits INLINE_MAX_BYTES; a body that moved on since the listing (a newer
    render) or that the object store cannot give is left for the host to GET."""
    wanted, budget = {}, INLINE_MAX_BYTES
    for f in files:
        if f["name"] in contract.INLINE_FILES and f["etag"] not in held and f["size"] <= budget:
            wanted[f["name"]] = f["etag"]
            budget -= f["size"]
    if not wanted:
        return {}
    found = artifacts.bodies(fleet, wanted, unreadable=lambda name, e: log.warning(
        "changes: %s of fleet %s not inlined: %s", name, fleet.slug, e))
    inline = {}
    for name in wanted:  # listing order
        if name in found:
            try:
                inline[name] = found[name].decode()
            except UnicodeDecodeError:
                continue
    return inline


def _holder(request: FleetRequest) -> str:
    token = request.auth
    return f"token:{token.pk}" if isinstance(token, ApiToken) else f"user:{request.user.pk}"


def _release_database() -> None:
    """Give the connection back before parking the thread: a waiter must not hold one.

    Inside a transaction (a test's, or ATOMIC_REQUESTS) it cannot be closed; it stays.
    """
    if not connection.in_atomic_block:
        connection.close()
