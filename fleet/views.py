"""Coordination endpoints: status, agents, sessions, leases, handoffs.

Views check shape (serializers) and call domain functions (fleet.leases, fleet.handoffs,
fleet.api_presence); FleetScoped has already set request.fleet, and every queryset
starts from it, so another fleet's row is 404 whatever its id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from fleet import actions, api_presence, api_roster
from fleet import serializers as s
from fleet.globs import BadPath
from fleet.idempotency import idempotent
from fleet.models import Agent, ApiToken, Handoff, Incident, Lease, Session
from fleet.permissions import COORDINATE, READ, SESSIONS, FleetRequest, FleetScoped
from mcp_bridge import contract

FLEET_PARAM = OpenApiParameter("fleet", str, OpenApiParameter.PATH, description="Fleet slug.")


class FleetViewSet(viewsets.GenericViewSet[Any]):
    """Base for every fleet-scoped endpoint: FleetScoped sets request.fleet and request.role."""

    permission_classes = [FleetScoped]
    request: FleetRequest  # FleetScoped has run before any handler reads it
    roles: dict[str, frozenset[str]] = {}
    cursor_ordering = "-id"
    _throttled = False  # this request has been counted (a view instance serves one request)

    def check_permissions(self, request: Request) -> None:
        """Count the request against the caller's rate limit before deciding it.

        DRF checks permissions before throttles, so a request FleetScoped refuses (404 for
        another fleet's URL, 403 for a weak role) would cost its caller nothing: a token
        could probe other fleets' URLs at any rate. Counting first makes every
        authenticated request count, whatever the answer.
        """
        self.check_throttles(request)
        super().check_permissions(request)

    def check_throttles(self, request: Request) -> None:
        """DRF calls this after the permissions; a request counted above is not counted twice."""
        if self._throttled:
            return
        self._throttled = True
        super().check_throttles(request)

    def acting_agent(self, agent_id: str | None) -> Agent:
        """The agent a write speaks for: the token's own agent, or the one named."""
        token = self.request.auth
        bound = token.agent if isinstance(token, ApiToken) else None
        if bound is not None:
            if agent_id and agent_id != bound.agent_id:
                raise ValidationError({"agent_id": [f"This token speaks for {bound.agent_id}."]})
            if bound.fleet_id == self.request.fleet.pk:
                bound.fleet = self.request.fleet  # loaded with the token: no query per write
            return bound
        if not agent_id:
            raise ValidationError({"agent_id": ["Required: this token is not bound to an agent."]})
        return api_presence.agent_named(self.request.fleet, agent_id)

    def session_for(self, agent: Agent, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        try:
            return api_presence.start_session(agent, session_id)[0]
        except api_presence.SessionTaken:
            raise ValidationError(
                {"session_id": ["This session belongs to another agent."]}
            ) from None

    def valid(self, serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def filtered(self, queryset: QuerySet[Any],
                 choices: Mapping[str, Sequence[str]]) -> QuerySet[Any]:
        """`queryset` narrowed by each of these query parameters the request gives (a field
        of the same name); a value outside its choices is a 400 that lists them."""
        for name, allowed in choices.items():
            value = self.request.query_params.get(name)
            if value is None:
                continue
            if value not in allowed:
                raise ValidationError({name: [f"one of {', '.join(allowed)}"]})
            queryset = queryset.filter(**{name: value})
        return queryset

    def page(self, queryset: QuerySet[Any], **context: Any) -> Response:
        page = self.paginate_queryset(queryset)
        data = self.get_serializer(
            page, many=True, context={**self.get_serializer_context(), **context}
        ).data
        return self.get_paginated_response(data)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class StatusViewSet(FleetViewSet):
    roles = {"status": READ}
    serializer_class = s.StatusSerializer
    pagination_class = None

    @extend_schema(
        summary="Roster: active agents, the leases each holds, and who overlaps whom",
        responses=s.StatusSerializer,
    )
    def status(self, request: FleetRequest, fleet: str) -> Response:
        return Response(s.StatusSerializer(api_roster.roster(request.fleet)).data)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class AgentViewSet(FleetViewSet):
    roles = {"list": READ, "heartbeat": COORDINATE}
    serializer_class = s.AgentSerializer
    cursor_ordering = "agent_id"

    def get_queryset(self) -> QuerySet[Agent]:
        return Agent.objects.filter(fleet=self.request.fleet)

    @extend_schema(summary="Agents of the fleet")
    def list(self, request: Request, fleet: str) -> Response:
        return self.page(self.get_queryset())

    @extend_schema(
        summary="Report an agent alive (registers it on first use)",
        request=s.HeartbeatRequest,
        responses=s.AgentSerializer,
        examples=[
            OpenApiExample(
                "heartbeat", {"agent_id": "ada", "runtime": "claude-code"}, request_only=True
            )
        ],
    )
    def heartbeat(self, request: Request, fleet: str) -> Response:
        data = self.valid(s.HeartbeatRequest)
        agent = self.acting_agent(data.get("agent_id"))
        agent = api_presence.heartbeat(agent, runtime=data["runtime"], host=data["host"])
        return Response(s.AgentSerializer(agent).data)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class SessionViewSet(FleetViewSet):
    roles = {"list": READ, "retrieve": READ, "start": SESSIONS, "end": SESSIONS}
    serializer_class = s.SessionSerializer
    lookup_field = "session_id"

    def get_queryset(self) -> QuerySet[Session]:
        return Session.objects.filter(fleet=self.request.fleet).select_related("agent")

    @extend_schema(summary="Recent sessions, newest first")
    def list(self, request: Request, fleet: str) -> Response:
        return self.page(self.get_queryset())

    @extend_schema(summary="One session")
    def retrieve(self, request: Request, fleet: str, session_id: str) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(
        summary="Start a session (what a SessionStart hook calls); a retry returns it again",
        request=s.SessionStartRequest,
        responses={201: s.SessionSerializer, 200: s.SessionSerializer},
        examples=[
            OpenApiExample(
                "start",
                {"agent_id": "ada", "session_id": "s-42", "repo": "git@example.com:acme/app"},
                request_only=True,
            )
        ],
    )
    def start(self, request: Request, fleet: str) -> Response:
        data = self.valid(s.SessionStartRequest)
        agent = self.acting_agent(data.get("agent_id"))
        try:
            session, created = api_presence.start_session(
                agent, data["session_id"], repo=data["repo"], branch=data["branch"]
            )
        except api_presence.SessionTaken:
            raise ValidationError(
                {"session_id": ["This session belongs to another agent."]}
            ) from None
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(s.SessionSerializer(session).data, status=code)

    @extend_schema(
        summary="End a session with its outcome and summary (what a SessionEnd hook calls)",
        request=s.SessionEndRequest,
        responses=s.SessionSerializer,
        examples=[
            OpenApiExample(
                "end", {"outcome": "success", "summary": "Fixed the flaky test"}, request_only=True
            )
        ],
    )
    @idempotent(contract.KIND_SESSION_END)
    def end(self, request: Request, fleet: str, session_id: str) -> Response:
        session = self.get_object()
        data = self.valid(s.SessionEndRequest)
        ended = actions.end_session(
            session, outcome=data["outcome"], summary=data["summary"],
            changed_paths=data["changed_paths"], repo=data["repo"], branch=data["branch"],
        )
        return Response(s.SessionSerializer(ended.session).data)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class LeaseViewSet(FleetViewSet):
    roles = {"list": READ, "claim": COORDINATE, "release": COORDINATE}
    serializer_class = s.LeaseSerializer

    def get_queryset(self) -> QuerySet[Lease]:
        return (
            Lease.objects.active()
            .filter(fleet=self.request.fleet)
            .select_related("agent", "session")
        )

    @extend_schema(summary="Active leases, each with the other agents' overlapping leases")
    def list(self, request: FleetRequest, fleet: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        contention = api_roster.contention_map(request.fleet, page or [])
        context = {**self.get_serializer_context(), "contention": contention}
        data = self.get_serializer(page, many=True, context=context).data
        return self.get_paginated_response(data)

    @extend_schema(
        summary="Hold (or renew) paths for a while; overlapping holders are reported, not refused",
        request=s.LeaseClaimRequest,
        responses={
            200: s.ClaimResultSerializer,
            409: OpenApiResponse(
                description="Refused, nothing taken: the new paths would take the agent past "
                "its cap on live leases (CTXLAKE_MAX_LIVE_LEASES_PER_AGENT); `detail` says so."
            ),
        },
        examples=[
            OpenApiExample(
                "claim",
                {
                    "agent_id": "ada",
                    "paths": ["src/api/**"],
                    "reason": "refactor",
                    "ttl_secs": 1800,
                },
                request_only=True,
            )
        ],
    )
    @idempotent(contract.KIND_LEASE_CLAIM)
    def claim(self, request: FleetRequest, fleet: str) -> Response:
        data = self.valid(s.LeaseClaimRequest)
        agent = self.acting_agent(data.get("agent_id"))
        ttl = timedelta(seconds=data["ttl_secs"]) if "ttl_secs" in data else None
        session = self.session_for(agent, data.get("session_id"))
        request_ = actions.ClaimRequest(
            agent, data["paths"], ttl, data["reason"], session, timezone.now()
        )
        (claimed,) = actions.claim_leases(request.fleet, [request_])
        if isinstance(claimed, ValueError):
            raise ValidationError({"paths": [str(claimed)]})
        if isinstance(claimed, actions.LeaseCapReached):  # well formed: release first
            return Response(
                {"detail": str(claimed), "live": claimed.live, "cap": claimed.cap},
                status=status.HTTP_409_CONFLICT,
            )
        result = claimed.result
        contention = [
            {
                "path": c.mine.path,
                "other_agent_id": c.theirs.agent.agent_id,
                "other_path": c.theirs.path,
                "other_expires_at": c.theirs.expires_at,
            }
            for c in result.contention
        ]
        body = {"held": result.held, "contention": contention}
        return Response(s.ClaimResultSerializer(body).data)

    @extend_schema(
        summary="Release the named paths, or everything the agent holds",
        request=s.LeaseReleaseRequest,
        responses=s.ReleaseResultSerializer,
        examples=[
            OpenApiExample(
                "release", {"agent_id": "ada", "paths": ["src/api/**"]}, request_only=True
            )
        ],
    )
    @idempotent(contract.KIND_LEASE_RELEASE)
    def release(self, request: FleetRequest, fleet: str) -> Response:
        data = self.valid(s.LeaseReleaseRequest)
        agent = self.acting_agent(data.get("agent_id"))
        wanted = actions.ReleaseRequest(agent, data.get("paths") or None)
        (result,) = actions.release_leases(request.fleet, [wanted])
        if isinstance(result, BadPath):
            raise ValidationError({"paths": [str(result)]})
        released = [lease.path for lease in result.released]
        return Response({"released": released, "not_held": result.not_held})


def _conflict(detail: str, expected: int | None, current: int) -> Response:
    body = {"detail": detail, "expected_version": expected, "current_version": current}
    return Response(s.VersionConflictSerializer(body).data, status=status.HTTP_409_CONFLICT)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class HandoffViewSet(FleetViewSet):
    roles = {
        "list": READ,
        "retrieve": READ,
        "create": COORDINATE,
        "pickup": COORDINATE,
        "clear": COORDINATE,
    }
    serializer_class = s.HandoffSerializer

    def get_queryset(self) -> QuerySet[Handoff]:
        qs = Handoff.objects.filter(fleet=self.request.fleet)
        return qs.select_related("from_agent", "from_session", "picked_up_by")

    def get_object(self) -> Handoff:
        """The handoff, its fleet the request's (already loaded, and the one it was looked
        up in): a pickup's or clear's audit row would otherwise read the fleet again."""
        handoff: Handoff = super().get_object()
        handoff.fleet = self.request.fleet
        return handoff

    @extend_schema(
        summary="Handoffs, newest first",
        parameters=[OpenApiParameter("state", str, enum=Handoff.State.values, required=False)],
    )
    def list(self, request: Request, fleet: str) -> Response:
        return self.page(self.filtered(self.get_queryset(), {"state": Handoff.State.values}))

    @extend_schema(summary="One handoff")
    def retrieve(self, request: Request, fleet: str, pk: str) -> Response:
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(
        summary="Leave a note for whoever picks the work up (operator tokens: operator trust)",
        request=s.HandoffCreateRequest,
        responses={201: s.HandoffSerializer},
        examples=[
            OpenApiExample(
                "create",
                {
                    "agent_id": "ada",
                    "summary": "Half-way through the API refactor",
                    "status": "in_progress",
                    "next_steps": "Finish the leases view",
                },
                request_only=True,
            )
        ],
    )
    @idempotent(contract.KIND_HANDOFF_CREATE)
    def create(self, request: FleetRequest, fleet: str) -> Response:
        data = self.valid(s.HandoffCreateRequest)
        agent = self.acting_agent(data.get("agent_id"))
        trust = Handoff.SourceTrust.OPERATOR if request.role == "operator" else "agent"
        note = Handoff(
            fleet=request.fleet,
            from_agent=agent,
            from_session=self.session_for(agent, data.get("session_id")),
            summary=data["summary"],
            status=data["status"],
            next_steps=data["next_steps"],
            source_trust=trust,
        )
        ((handoff, _),) = actions.create_handoffs(request.fleet, [(note, None)])
        return Response(s.HandoffSerializer(handoff).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Pick up a pending handoff (the pickup gate: non-operator trust needs confirm)",
        description=(
            "A handoff whose source trust is not `operator` was written by an agent: without "
            "`confirm: true` nothing changes and the answer has `needs_confirmation: true`. "
            "`version` is compare-and-swap: a stale one is 409 with the current version."
        ),
        request=s.HandoffPickupRequest,
        responses={200: s.PickupResultSerializer, 409: s.VersionConflictSerializer},
        examples=[
            OpenApiExample(
                "pickup", {"agent_id": "bo", "version": 1, "confirm": True}, request_only=True
            )
        ],
    )
    def pickup(self, request: Request, fleet: str, pk: str) -> Response:
        handoff = self.get_object()
        data = self.valid(s.HandoffPickupRequest)
        agent = self.acting_agent(data.get("agent_id"))
        try:
            result = actions.pick_up_handoff(
                handoff,
                by=agent,
                expected_version=data["version"],
                confirm=data["confirm"],
                session=self.session_for(agent, data.get("session_id")),
            )
        except actions.NotPending:
            return _conflict(
                f"The handoff is {handoff.state}, not pending.", data["version"], handoff.version
            )
        if isinstance(result, actions.Conflict):
            return _conflict(
                "The handoff changed; re-read it and retry.",
                result.expected_version,
                result.current_version,
            )
        gated = isinstance(result, actions.NeedsConfirmation)
        body = {
            "picked_up": not gated,
            "needs_confirmation": gated,
            "message": cast(actions.NeedsConfirmation, result).message if gated else "Picked up.",
            "handoff": handoff if gated else result,
            "transferred_leases": [] if gated else cast(Handoff, result).transferred_paths,
        }
        return Response(s.PickupResultSerializer(body).data)

    @extend_schema(
        summary="Clear a handoff (compare-and-swap on version)",
        request=s.HandoffClearRequest,
        responses={200: s.HandoffSerializer, 409: s.VersionConflictSerializer},
        examples=[OpenApiExample("clear", {"version": 2}, request_only=True)],
    )
    def clear(self, request: Request, fleet: str, pk: str) -> Response:
        handoff = self.get_object()
        data = self.valid(s.HandoffClearRequest)
        token = request.auth
        by = token.agent if isinstance(token, ApiToken) else None
        user = None if isinstance(token, ApiToken) else request.user
        result = actions.clear_handoff(handoff, expected_version=data["version"], by=by, user=user)
        if isinstance(result, actions.Conflict):
            return _conflict(
                "The handoff changed; re-read it and retry.",
                result.expected_version,
                result.current_version,
            )
        return Response(s.HandoffSerializer(result).data)


@extend_schema(tags=["coordination"], parameters=[FLEET_PARAM])
class IncidentViewSet(FleetViewSet):
    """Read-only: incidents are recorded by the server (fleet.incidents), never posted."""

    roles = {"list": READ}
    serializer_class = s.IncidentSerializer

    def get_queryset(self) -> QuerySet[Incident]:
        return Incident.objects.filter(fleet=self.request.fleet).select_related(
            "fleet", "actor", "holder")

    @extend_schema(
        summary="Incidents (an edit or commit in another's lease, a refused pickup, a lasting "
                "overlap, a retirement), newest first",
        parameters=[OpenApiParameter("kind", str, enum=Incident.Kind.values, required=False)],
    )
    def list(self, request: Request, fleet: str) -> Response:
        return self.page(self.filtered(self.get_queryset(), {"kind": Incident.Kind.values}))
