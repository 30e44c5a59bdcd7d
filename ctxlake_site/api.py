"""The REST API's shared machinery: body-size limit, pagination, throttling, errors.

Each piece is DRF's own mechanism, configured in settings.REST_FRAMEWORK; this module
only adds what DRF does not do out of the box:

- DRF parsers read the WSGI stream directly, so DATA_UPLOAD_MAX_MEMORY_SIZE never sees
  a JSON body. The parsers here count the bytes themselves and answer 413.
- DRF's throttles capture their rates at import time; ours re-read them, so a test (or
  a settings reload) can change them.
"""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions, parsers, status
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

MAX_ROWS = 200
DEFAULT_ROWS = 50


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def max_body_bytes() -> int:
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440)


def read_bounded(stream: Any, context: dict[str, Any] | None) -> bytes:
    """Read the whole body, refusing (413) as soon as it passes the configured size."""
    limit = max_body_bytes()
    request = (context or {}).get("request")
    declared = request.META.get("CONTENT_LENGTH") if request is not None else None
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is {declared} bytes; the limit is {limit}.")
    data = stream.read(limit + 1) if stream is not None else b""
    if len(data) > limit:
        raise PayloadTooLarge(f"Request body is over the limit of {limit} bytes.")
    return data


class BoundedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        body = read_bounded(stream, parser_context)
        return super().parse(io.BytesIO(body), media_type, parser_context)


class NDJSONParser(parsers.BaseParser):
    """application/x-ndjson: the raw lines, each validated by the view that takes them."""

    media_type = "application/x-ndjson"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return read_bounded(stream, parser_context).splitlines()


class FleetCursorPagination(CursorPagination):
    """Cursor pagination on every list; `limit` picks the page size, clamped to 200."""

    page_size = DEFAULT_ROWS
    page_size_query_param = "limit"
    max_page_size = MAX_ROWS
    ordering = "-id"

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        return (getattr(view, "cursor_ordering", self.ordering),)

    def get_page_size(self, request: Request) -> int:
        try:
            wanted = int(request.query_params.get(self.page_size_query_param, self.page_size))
        except ValueError:
            return self.page_size
        return min(max(wanted, 1), self.max_page_size)


class TokenRateThrottle(SimpleRateThrottle):
    """One bucket per API token (or per staff user in the browsable API)."""

    scope = "token"

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        token = getattr(request, "auth", None)
        ident = f"t{token.pk}" if hasattr(token, "key_hash") else None
        if ident is None and request.user and request.user.is_authenticated:
            ident = f"u{request.user.pk}"
        if ident is None:
            return None  # unauthenticated requests are refused before they cost anything
        return self.cache_format % {"scope": self.scope, "ident": ident}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus: an oversized body read through Django is 413, not 400."""
    # Imported here: rest_framework.views reads REST_FRAMEWORK at import, which names this
    # module, so a module-level import would be circular when a command loads DRF first.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(str(exc) or None)
    return drf_exception_handler(exc, context)


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "fleet.auth.ApiTokenAuthentication"
    name = "ApiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "ctx_…",
            "description": "A fleet-scoped API token from `manage.py issue_token`.",
        }
