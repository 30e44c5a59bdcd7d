"""Database outages answered as what they are: 503 with Retry-After, never a traceback."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

RETRY_AFTER_SECS = 10
#: One log line per this many seconds while the database stays down, not one per request.
LOG_EVERY_SECS = 60
_last_logged = 0.0


class DatabaseUnavailableMiddleware:
    """Turn a lost or refused database connection into 503 for every view (REST, admin).

    Only connection-level errors qualify (OperationalError, InterfaceError): a query the
    database refuses for its content is a bug and stays a 500.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, (OperationalError, InterfaceError)):
            return None
        _log_once_a_minute(exc)
        headers = {"Retry-After": str(RETRY_AFTER_SECS)}
        detail = "The ctxlake database is unavailable; retry shortly."
        if request.path.startswith("/api/"):
            body = {"detail": detail, "code": "database_unavailable"}
            return JsonResponse(body, status=503, headers=headers)
        return HttpResponse(detail, status=503, content_type="text/plain", headers=headers)


def _log_once_a_minute(exc: Exception) -> None:
    global _last_logged
    now = time.monotonic()
    if now - _last_logged >= LOG_EVERY_SECS:
        _last_logged = now
        log.error("database unavailable (%s); answering 503 until it is back",
                  type(exc).__name__)
