"""OpenAPI post-processing: document the error answers every endpoint can give.

drf-spectacular documents what a view returns on success; the errors come from shared
machinery (authentication, FleetScoped, throttling, the bounded parsers), so they are
added here once, for every operation, instead of on each view.
"""

from __future__ import annotations

from typing import Any

ERROR = {
    "type": "object",
    "description": "`detail` for most errors; field name → messages for validation errors.",
    "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    "additionalProperties": True,
}
COMMON = {
    "400": "Invalid input: field-level messages.",
    "401": "No token, or an invalid or revoked one.",
    "403": "This token's role may not do this.",
    "404": "No such fleet or object, or not yours (the two look the same).",
    "429": "Throttled; see Retry-After.",
}
WITH_BODY = {"413": "Request body over the configured size."}


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["ApiError"] = ERROR
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ApiError"}}}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            codes = dict(COMMON)
            if method in ("post", "put", "patch"):
                codes.update(WITH_BODY)
            responses = operation.setdefault("responses", {})
            for code, description in codes.items():
                responses.setdefault(code, {"description": description, "content": ref})
    return result
