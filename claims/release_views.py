"""REST for flagged text (operators): what the instruction screen holds back, and release.

`GET screen/flagged` lists the rows of the fleet whose text agents see as withheld, with
the spans and reasons; `POST screen/release` lets one row's text through, through the
same function as the admin's action (claims.release.release_text, audited).
"""

from __future__ import annotations

from typing import Any, cast

from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from claims import moderation, release
from claims.models import Claim, ClaimQuerySet
from fleet.models import ApiToken, Handoff, Lease, Screened, Session
from fleet.permissions import MODERATE
from fleet.screen_view import FLAGGED, STATE_Q
from fleet.serializers import PlainText
from fleet.views import FLEET_PARAM, FleetViewSet

KINDS = ("claim", "session", "handoff", "lease")
FLAGGED_ROWS = 200  # per kind, newest first


def _pending(qs: QuerySet[Any]) -> QuerySet[Any]:
    """Rows with flagged text no person has released (a claim also by its evidence)."""
    if qs.model is Claim:
        return release.claims_in_state(qs, FLAGGED)
    return qs.filter(STATE_Q[FLAGGED])


def public_id(kind: str, row: Model) -> str:
    """How REST and the admin name a screened row: cc-NN, the session id, h-N, the lease id."""
    if kind == "claim":
        return row.public_id  # type: ignore[attr-defined,no-any-return]
    if kind == "session":
        return row.session_id  # type: ignore[attr-defined,no-any-return]
    return f"h-{row.pk}" if kind == "handoff" else str(row.pk)


class ReleaseRequest(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=KINDS)
    id = PlainText(max_length=200, help_text="cc-NN, a session id, h-N or a lease id")
    note = PlainText(required=False, allow_blank=True, max_length=2000, default="")


class FlaggedSerializer(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=KINDS)
    id = serializers.CharField()
    author = serializers.CharField(allow_null=True)
    flags = serializers.DictField(help_text="{field: [{start, end, rule, reason}]}")
    text = serializers.DictField(help_text="{field: the text as written}")


class ReleasedSerializer(FlaggedSerializer):
    released_at = serializers.DateTimeField()


class FlaggedListSerializer(serializers.Serializer[Any]):
    results = FlaggedSerializer(many=True)
    truncated = serializers.BooleanField(
        help_text=f"True when a kind had more than {FLAGGED_ROWS} rows waiting.")


@extend_schema(tags=["moderation"], parameters=[FLEET_PARAM])
class ScreenViewSet(FleetViewSet):
    roles = {"flagged": MODERATE, "release": MODERATE}

    @extend_schema(summary="Text the instruction screen holds back from agents (operator)",
                   responses={200: FlaggedListSerializer})
    def flagged(self, request: Request, fleet: str) -> Response:
        rows, truncated = [], False
        for kind, qs in self._tables().items():
            found = list(_pending(qs).order_by("-pk")[:FLAGGED_ROWS + 1])
            truncated |= len(found) > FLAGGED_ROWS
            rows += [self._flagged(kind, row) for row in found[:FLAGGED_ROWS]]
        return Response(FlaggedListSerializer({"results": rows, "truncated": truncated}).data)

    @extend_schema(summary="Release one row's flagged text to agents (operator; audited)",
                   request=ReleaseRequest, responses={200: ReleasedSerializer})
    def release(self, request: Request, fleet: str) -> Response:
        data = self.valid(ReleaseRequest)
        row = self._find(data["kind"], data["id"])
        actor = request.auth if isinstance(request.auth, ApiToken) else request.user
        try:
            done = release.release_text(row, by=actor, note=data["note"])
        except release.NothingToRelease as exc:
            return Response({"detail": str(exc), "code": "nothing_to_release"},
                            status=status.HTTP_409_CONFLICT)
        except moderation.GateRefused as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(ReleasedSerializer(
            {**self._flagged(data["kind"], done), "released_at": done.screen_released_at}).data)

    def _tables(self) -> dict[str, QuerySet[Any]]:
        fleet = self.request.fleet
        return {
            "claim": Claim.objects.for_fleet(fleet).defer("embedding", "search_vector")
            .select_related("proposed_by"),
            "session": Session.objects.filter(fleet=fleet).select_related("agent"),
            "handoff": Handoff.objects.filter(fleet=fleet).select_related("from_agent"),
            "lease": Lease.objects.filter(fleet=fleet).select_related("agent"),
        }

    def _find(self, kind: str, ident: str) -> Screened:
        qs = self._tables()[kind]
        if kind == "claim":
            row = cast(ClaimQuerySet, qs).by_public_id(ident).first()
        elif kind == "session":
            row = qs.filter(session_id=ident).first()
        else:
            number = ident.removeprefix("h-") if kind == "handoff" else ident
            row = qs.filter(pk=int(number)).first() if number.isdigit() and len(number) < 18 \
                else None
        if row is None:
            raise exceptions.NotFound(f"No {kind} {ident} in this fleet.")
        return row

    def _flagged(self, kind: str, row: Screened) -> dict[str, Any]:
        author = getattr(row, row.SCREEN_AUTHOR)
        parts = (row.screened_parts(pending=False) if isinstance(row, Claim)
                 else {f: (getattr(row, f), spans) for f, spans in row.screen_flags.items()})
        flags = {label: spans for label, (_, spans) in parts.items()}
        text = {label: written for label, (written, _) in parts.items()}
        return {"kind": kind, "id": public_id(kind, row),
                "author": author.agent_id if author is not None else None,
                "flags": flags, "text": text}
