"""Request body parsers for the REST API: a size limit and a depth limit on every body.

DRF parsers read the WSGI stream directly, so DATA_UPLOAD_MAX_MEMORY_SIZE never sees a
JSON body: these parsers count the bytes themselves and answer 413. JSON nested deeper than
the contract allows is refused with 400 before any view sees it (Python's json module
would otherwise raise RecursionError, a 500).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status

from mcp_bridge.contract import events


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
    """JSON bodies within the size limit and the contract's nesting depth."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        body = read_bounded(stream, parser_context)
        try:
            return events.loads(body.decode("utf-8"))
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}") from None


class NDJSONParser(parsers.BaseParser):
    """application/x-ndjson: the raw lines, each validated by the view that takes them."""

    media_type = "application/x-ndjson"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return read_bounded(stream, parser_context).splitlines()


