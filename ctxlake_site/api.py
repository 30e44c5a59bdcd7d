"""The REST API's shared machinery: body-size limit, pagination, throttling, errors.

Each piece is DRF's own mechanism, configured in settings.REST_FRAMEWORK; this module
only adds what DRF does not do out of the box:

- Bodies are parsed by fleet.api_parsers (size limit, depth limit); an oversized body
  that Django itself refuses is turned into the same 413 here.
- DRF's throttles capture their rates at import time; ours re-read them, so a test (or
  a settings reload) can change them. And DRF's throttle keeps a history list in the
  cache with a read-modify-write, which concurrent web workers overwrite (4 clients got
  1,759 requests through a limit of 1,200): ours counts with one atomic upsert per
  request in Postgres (RateWindow), shared by every worker and host.
"""

from __future__ import annotations

import time
from typing import Any, cast

from django.core.exceptions import RequestDataTooBig
from django.db import connection
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from fleet.api_parsers import PayloadTooLarge

MAX_ROWS = 200
DEFAULT_ROWS = 50


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
    """One bucket per API token (or per staff user in the browsable API), per fixed window.

    A fixed window (the minute, for "N/min") counted atomically: at most N requests per
    window, whatever the number of web workers; Retry-After names the window's end.
    """

    scope = "token"
    # Set by SimpleRateThrottle.__init__ from the rate (parse_rate); the stub leaves them out.
    num_requests: int
    duration: int
    #: A request in about this share of requests deletes the counters of past windows.
    SWEEP_EVERY = 200
    _SQL = (
        "INSERT INTO ctxlake_site_ratewindow (key, count, expires_at) "
        "VALUES (%s, 1, to_timestamp(%s)) "
        "ON CONFLICT (key) DO UPDATE SET count = ctxlake_site_ratewindow.count + 1 "
        "RETURNING count"
    )

    def get_rate(self) -> str | None:
        # Rates are "N/period" strings (parse_rate splits them); the stub says numbers.
        return cast("str | None", api_settings.DEFAULT_THROTTLE_RATES.get(self.scope))

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        ident = self.get_cache_key(request, view)
        if ident is None:
            return True
        now = time.time()
        window = int(now // self.duration)
        self.wait_secs = (window + 1) * self.duration - now
        with connection.cursor() as cur:
            cur.execute(self._SQL, [f"{ident}:{window}", (window + 2) * self.duration])
            count = cur.fetchone()[0]
            if count % self.SWEEP_EVERY == 0:
                cur.execute("DELETE FROM ctxlake_site_ratewindow WHERE expires_at < now()")
        return bool(count <= self.num_requests)

    def wait(self) -> float | None:
        return getattr(self, "wait_secs", None)

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        token: Any = getattr(request, "auth", None)
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
