"""`Idempotency-Key` for REST writes: a retried request is answered, not applied twice.

The spool gets this from event ids (the drain records each in AppliedEvent); a REST
caller gets it by sending a UUID in the `Idempotency-Key` header. The write and the
record of its answer commit together; a retry with the same key gets the recorded answer
(with `Idempotent-Replayed: true`), and a key already used for another kind of write, or
in another fleet, is refused with 409. Without the header a request is applied as sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework import status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from fleet.models import AppliedEvent
from fleet.permissions import FleetRequest

HEADER = "Idempotency-Key"
View = Callable[..., Response]


def idempotent(kind: str) -> Callable[[View], View]:
    """Make a REST write view honour `Idempotency-Key` (see the module docstring)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(self: Any, request: FleetRequest, *args: Any, **kwargs: Any) -> Response:
            raw = request.headers.get(HEADER)
            if raw is None:
                return view(self, request, *args, **kwargs)
            try:
                key = uuid.UUID(raw)
            except ValueError:
                return Response({"detail": f"{HEADER} must be a UUID"},
                                status=status.HTTP_400_BAD_REQUEST)
            try:
                with transaction.atomic():
                    recorded = _recorded(request, key, kind)
                    if recorded is not None:
                        return recorded
                    response = view(self, request, *args, **kwargs)
                    if response.status_code < 400:
                        AppliedEvent.objects.create(
                            event_id=key, fleet=request.fleet, kind=kind, source="api",
                            result={"status": response.status_code, "body": _plain(response)},
                        )
                    return response
            except IntegrityError:  # the same key raced in: the other one won; answer as it did
                return _recorded(request, key, kind) or _conflict(kind)

        return wrapper

    return decorate


def _recorded(request: FleetRequest, key: uuid.UUID, kind: str) -> Response | None:
    done = AppliedEvent.objects.filter(event_id=key).first()
    if done is None:
        return None
    if done.fleet_id != request.fleet.pk or done.kind != kind or done.source != "api":
        return _conflict(kind)
    return Response(done.result.get("body"), status=done.result.get("status", 200),
                    headers={"Idempotent-Replayed": "true"})


def _conflict(kind: str) -> Response:
    return Response({"detail": f"This {HEADER} was already used for another write than {kind}."},
                    status=status.HTTP_409_CONFLICT)


def _plain(response: Response) -> Any:
    """The answer's data as plain JSON (what a replay sends back)."""
    return json.loads(JSONRenderer().render(response.data) or b"null")
