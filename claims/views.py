"""Memory endpoints: search, list, propose, get, moderate, timeline.

What a caller sees follows the fleet's memory mode, as the bridge's snapshot does:
operators see every claim; agent and integration tokens see promoted claims in `live`
mode, nothing in `shadow` (search says enabled, returns nothing), and search is disabled
in `off`. Moderation goes through claims.moderation, the only writer of claim state.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response

from claims import moderation, search, usefulness
from claims import serializers as s
from claims.models import Claim, ClaimEvent, ClaimQuerySet
from fleet.idempotency import idempotent
from fleet.models import ApiToken, Fleet
from fleet.permissions import MODERATE, PROPOSE, READ, FleetRequest
from fleet.views import FLEET_PARAM, FleetViewSet
from mcp_bridge import contract

CLAIM_PARAM = OpenApiParameter("claim_id", str, OpenApiParameter.PATH, description="cc-NN")
NOTES: dict[str, str] = {
    Fleet.MemoryMode.OFF: "memory is off for this fleet",
    Fleet.MemoryMode.SHADOW: "shadow mode: claims are collected but not shown to agents yet",
}


def visible_claims(request: FleetRequest) -> ClaimQuerySet:
    qs = Claim.objects.for_fleet(request.fleet)
    if request.role == ApiToken.Role.OPERATOR:
        return qs
    if request.fleet.memory_mode != Fleet.MemoryMode.LIVE:
        return qs.none()
    return qs.promoted()


@extend_schema(tags=["memory"], parameters=[FLEET_PARAM])
class ClaimViewSet(FleetViewSet):
    roles = {
        "list": READ,
        "retrieve": READ,
        "search": READ,
        "propose": PROPOSE,
        "promote": MODERATE,
        "reject": MODERATE,
        "contest": MODERATE,
        "retract": MODERATE,
        "supersede": MODERATE,
        "valid_until": MODERATE,
        "merge": MODERATE,
        "feedback": PROPOSE,
    }
    serializer_class = s.ClaimSerializer
    lookup_url_kwarg = "claim_id"

    def get_queryset(self) -> ClaimQuerySet:
        return visible_claims(self.request).defer("embedding", "search_vector")

    def get_object(self) -> Claim:
        claim = self.get_queryset().by_public_id(self.kwargs["claim_id"]).first()
        if claim is None:
            raise exceptions.NotFound()
        return claim

    @extend_schema(
        summary="Claims, newest first (filters: status, type, subject)",
        parameters=[
            OpenApiParameter("status", str, enum=Claim.Status.values, required=False),
            OpenApiParameter("type", str, enum=Claim.Type.values, required=False),
            OpenApiParameter("subject", str, required=False),
        ],
    )
    def list(self, request: Request, fleet: str) -> Response:
        qs = self.filtered(self.get_queryset(),
                           {"status": Claim.Status.values, "type": Claim.Type.values})
        if request.query_params.get("subject"):
            qs = qs.filter(subject=request.query_params["subject"])
        return self.page(qs)

    @extend_schema(
        summary="Search claims (full-text, websearch syntax), best first; capped with truncated",
        parameters=[s.SearchRequest],
        responses=s.SearchResponse,
    )
    def search(self, request: FleetRequest, fleet: str) -> Response:
        params = s.SearchRequest(data=request.query_params)
        params.is_valid(raise_exception=True)
        p = params.validated_data
        mode, operator = request.fleet.memory_mode, request.role == ApiToken.Role.OPERATOR
        if mode == Fleet.MemoryMode.OFF and not operator:
            return Response(
                {"enabled": False, "results": [], "truncated": False, "note": NOTES[mode]}
            )
        if mode == Fleet.MemoryMode.SHADOW and not operator:
            return Response(
                {"enabled": True, "results": [], "truncated": False, "note": NOTES[mode]}
            )
        if operator:
            statuses: list[str] = [p["status"]] if "status" in p else Claim.Status.values
        else:
            statuses = [Claim.Status.PROMOTED] if p.get("status", "promoted") == "promoted" else []
        found = search.search_claims(
            request.fleet,
            p["q"],
            k=search.clamp(p["k"]),
            scope=p.get("scope"),
            subject=p.get("subject"),
            claim_type=p.get("type"),
            statuses=statuses,
        )
        body = {"enabled": True, "results": found.claims, "truncated": found.truncated, "note": ""}
        return Response(s.SearchResponse(body).data)

    @extend_schema(
        summary="One claim with its evidence and events",
        parameters=[CLAIM_PARAM],
        responses=s.ClaimDetailSerializer,
    )
    def retrieve(self, request: Request, fleet: str, claim_id: str) -> Response:
        claim = self.get_object()
        claim = Claim.objects.prefetch_related(
            "evidence", "events__actor_user", "events__actor_agent"
        ).get(pk=claim.pk)
        return Response(s.ClaimDetailSerializer(claim).data)

    @extend_schema(
        summary="Propose a claim with evidence (scrubbed); an exact duplicate corroborates",
        request=s.ProposeRequest,
        responses={201: s.ProposalResponse, 200: s.ProposalResponse},
        examples=[
            OpenApiExample(
                "propose",
                {
                    "text": "cargo test --workspace needs RUSTFLAGS=-D warnings",
                    "type": "gotcha",
                    "subject": "ci",
                    "evidence": [{"session_id": "s-42", "message_id": "m-7", "path": "ci.yml"}],
                },
                request_only=True,
            )
        ],
    )
    @idempotent(contract.KIND_CLAIM_PROPOSED)
    def propose(self, request: FleetRequest, fleet: str) -> Response:
        params = s.ProposeRequest(data=request.data)
        params.is_valid(raise_exception=True)
        data = dict(params.validated_data)
        agent_id = data.pop("agent_id", None)
        token = request.auth
        bound = token.agent if isinstance(token, ApiToken) else None
        agent = self.acting_agent(agent_id) if (agent_id or bound) else None
        found = params.redacted
        try:
            proposal = moderation.propose_claim(request.fleet, by_agent=agent, **data)
        except moderation.InvalidProposal as exc:
            raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from exc
        body = {
            "created": proposal.created,
            "evidence_added": proposal.evidence_added,
            "redacted": found,
            "claim": proposal.claim,
        }
        code = status.HTTP_201_CREATED if proposal.created else status.HTTP_200_OK
        return Response(s.ProposalResponse(body).data, status=code)

    def _moderate(self, request: Request, verb: str, text: str) -> Response:
        return self._run(_DECIDE[verb], **{_ARG[verb]: text})

    @extend_schema(
        summary="Promote through the gate (operator)",
        parameters=[CLAIM_PARAM],
        request=s.NoteRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def promote(self, request: Request, fleet: str, claim_id: str) -> Response:
        return self._moderate(request, "promote", self._field(s.NoteRequest, "note"))

    @extend_schema(
        summary="Reject a proposal, with a reason (operator)",
        parameters=[CLAIM_PARAM],
        request=s.ReasonRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def reject(self, request: Request, fleet: str, claim_id: str) -> Response:
        return self._moderate(request, "reject", self._field(s.ReasonRequest, "reason"))

    @extend_schema(
        summary="Flag a claim as contested (operator)",
        parameters=[CLAIM_PARAM],
        request=s.NoteRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def contest(self, request: Request, fleet: str, claim_id: str) -> Response:
        return self._moderate(request, "contest", self._field(s.NoteRequest, "note"))

    @extend_schema(
        summary="Retract a claim for good (operator)",
        parameters=[CLAIM_PARAM],
        request=s.NoteRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def retract(self, request: Request, fleet: str, claim_id: str) -> Response:
        return self._moderate(request, "retract", self._field(s.NoteRequest, "note"))

    @extend_schema(
        summary="Supersede a promoted claim by another (operator); a proposed replacement "
        "is promoted through the gate in the same step",
        parameters=[CLAIM_PARAM],
        request=s.SupersedeRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def supersede(self, request: Request, fleet: str, claim_id: str) -> Response:
        data = self._params(s.SupersedeRequest)
        new = self._other(data["by"])
        return self._run(moderation.supersede_claim, new=new, note=data["note"])

    @extend_schema(
        summary="Set or clear until when a claim holds (operator)",
        parameters=[CLAIM_PARAM],
        request=s.ValidUntilRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def valid_until(self, request: Request, fleet: str, claim_id: str) -> Response:
        data = self._params(s.ValidUntilRequest)
        return self._run(moderation.set_valid_until, until=data["valid_until"], note=data["note"])

    @extend_schema(
        summary="Merge a proposal into another claim as corroboration (operator)",
        parameters=[CLAIM_PARAM],
        request=s.MergeRequest,
        responses={200: s.ClaimSerializer, 409: s.ModerationConflict},
    )
    def merge(self, request: Request, fleet: str, claim_id: str) -> Response:
        into = self._other(self._params(s.MergeRequest)["into"])
        return self._run(moderation.merge_claim, into=into)

    @extend_schema(
        summary="An agent's feedback on a claim (helpful, wrong, outdated, unclear): a "
        "moderator's task; the claim is not changed",
        parameters=[CLAIM_PARAM],
        request=s.FeedbackRequest,
        responses={201: s.FeedbackResponse},
    )
    @idempotent(contract.KIND_CLAIM_FEEDBACK)
    def feedback(self, request: FleetRequest, fleet: str, claim_id: str) -> Response:
        data = self._params(s.FeedbackRequest)
        claim = self.get_object()
        agent = self.acting_agent(data.get("agent_id"))
        try:
            fb = usefulness.file_feedback(
                request.fleet, claim.public_id, agent=agent,
                session=self.session_for(agent, data.get("session_id")),
                verdict=data["verdict"], note=data["note"])
        except usefulness.FeedbackRefused as exc:
            raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from exc
        body = {"feedback": fb.pk, "claim": claim.public_id, "verdict": fb.verdict,
                "message": "A moderator will see it as a task; the claim is unchanged until "
                           "a person acts."}
        return Response(s.FeedbackResponse(body).data, status=status.HTTP_201_CREATED)

    def _params(self, serializer_class: Any) -> dict[str, Any]:
        params = serializer_class(data=self.request.data)
        params.is_valid(raise_exception=True)
        return dict(params.validated_data)

    def _other(self, public_id: str) -> Claim:
        other = Claim.objects.for_fleet(self.request.fleet).by_public_id(public_id).first()
        if other is None:
            raise exceptions.ValidationError({"claim": [f"No claim {public_id} in this fleet."]})
        return other

    def _run(self, fn: Any, **kwargs: Any) -> Response:
        """One moderation function on this claim, by the caller; conflicts are 409.

        An operator token acts as itself; staff on the browsable API act as themselves.
        """
        claim = self.get_object()
        actor = self.request.auth if isinstance(self.request.auth, ApiToken) else self.request.user
        try:
            done = fn(claim, by=actor, **kwargs)
        except moderation.AlreadyDecided as exc:
            return Response(
                {"detail": str(exc), "code": "already_decided"}, status=status.HTTP_409_CONFLICT
            )
        except moderation.GateRefused as exc:
            return Response(
                {"detail": str(exc), "code": "gate_refused"}, status=status.HTTP_409_CONFLICT
            )
        return Response(s.ClaimSerializer(done).data)

    def _field(self, serializer_class: Any, name: str) -> str:
        params = serializer_class(data=self.request.data)
        params.is_valid(raise_exception=True)
        return str(params.validated_data[name])


_DECIDE: dict[str, Any] = {
    "promote": moderation.promote_claim,
    "reject": moderation.reject_claim,
    "contest": moderation.contest_claim,
    "retract": moderation.retract_claim,
}
_ARG = {"promote": "note", "reject": "reason", "contest": "note", "retract": "note"}


@extend_schema(tags=["memory"], parameters=[FLEET_PARAM])
class TimelineViewSet(FleetViewSet):
    """What the fleet has tried about a subject: the events of the claims the caller sees."""

    roles = {"list": READ}
    serializer_class = s.TimelineEntrySerializer

    @extend_schema(
        summary="Timeline for a subject: claim events, newest first", parameters=[s.TimelineRequest]
    )
    def list(self, request: FleetRequest, fleet: str) -> Response:
        params = s.TimelineRequest(data=request.query_params)
        params.is_valid(raise_exception=True)
        claims = visible_claims(request).filter(subject=params.validated_data["subject"])
        events = ClaimEvent.objects.filter(claim__in=claims).select_related(
            "claim", "actor_user", "actor_agent"
        )
        return self.page(events)
