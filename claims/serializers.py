"""Request and response shapes for the memory API. Shape and validation only: the
scrubbing and every rule about evidence live in claims.moderation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rest_framework import serializers

from claims import moderation, search
from claims.models import Claim, ClaimEvent, Evidence
from fleet import lineage
from fleet.serializers import (
    AgentIdField,
    ContractChecked,
    FieldsBuiltOnce,
    PlainText,
    WithholdsFlagged,
)
from mcp_bridge.contract import events as ev

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from fleet.models import Agent, ApiToken

_LIMIT = ev.CITATION_LIMITS


class CitationSerializer(serializers.Serializer[Any]):
    session_id = PlainText(max_length=_LIMIT["session_id"])
    message_id = PlainText(max_length=_LIMIT["message_id"])
    repo = PlainText(required=False, allow_blank=True, max_length=_LIMIT["repo"])
    path = PlainText(required=False, allow_blank=True, max_length=_LIMIT["path"])
    commit = PlainText(required=False, allow_blank=True, max_length=_LIMIT["commit"])
    excerpt = PlainText(required=False, allow_blank=True, max_length=_LIMIT["excerpt"])

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(moderation.CITATION_FIELDS))
            if unknown:  # refused, not dropped: the caller meant something by them
                raise serializers.ValidationError(f"unknown keys: {', '.join(unknown)}")
        return super().to_internal_value(data)


class ProposeRequest(ContractChecked):
    kind = ev.KIND_CLAIM_PROPOSED
    renamed = {"claim": "text"}
    text = PlainText(max_length=ev.CLAIM_MAX_CHARS)
    type = serializers.ChoiceField(choices=Claim.Type.values)
    subject = PlainText(max_length=ev.SUBJECT_MAX_CHARS)
    # DRF hands max_length to the ListSerializer many=True makes; the stub's __init__ omits it.
    evidence = CitationSerializer(many=True, allow_empty=False, max_length=ev.CITATIONS_MAX)  # type: ignore[call-arg]
    agent_id = AgentIdField(required=False, help_text="The proposing agent, if any.")


class FeedbackRequest(serializers.Serializer[Any]):
    verdict = serializers.ChoiceField(choices=ev.FEEDBACK_VERDICTS)
    note = PlainText(required=False, allow_blank=True, max_length=ev.FEEDBACK_NOTE_MAX_CHARS,
                     default="", help_text="What you found; required unless helpful.")
    agent_id = AgentIdField(required=False, help_text="The agent giving it, if the token is "
                                                      "not bound to one.")
    session_id = serializers.CharField(required=False, max_length=ev.ID_MAX_CHARS)


class FeedbackResponse(serializers.Serializer[Any]):
    feedback = serializers.IntegerField()
    claim = serializers.CharField()
    verdict = serializers.CharField()
    message = serializers.CharField()


class NoteRequest(serializers.Serializer[Any]):
    note = PlainText(required=False, allow_blank=True, max_length=2000, default="")


class ReasonRequest(serializers.Serializer[Any]):
    reason = PlainText(max_length=2000)


class EvidenceSerializer(WithholdsFlagged):
    verified = serializers.SerializerMethodField(
        help_text="The fleet has seen this session from one of its agents; only verified "
        "sessions count toward independent_sessions."
    )

    class Meta:
        model = Evidence
        fields = (
            "session_id",
            "message_id",
            "repo",
            "path",
            "commit",
            "excerpt",
            "created_at",
            "verified",
        )

    def get_verified(self, evidence: Evidence) -> bool:
        return evidence.session_id in self.context.get("verified", ())


class SupersedeRequest(serializers.Serializer[Any]):
    by = PlainText(max_length=20, help_text="The claim that replaces this one (cc-NN).")
    note = PlainText(required=False, allow_blank=True, max_length=2000, default="")


class ValidUntilRequest(serializers.Serializer[Any]):
    valid_until = serializers.DateTimeField(allow_null=True, help_text="null: indefinitely")
    note = PlainText(required=False, allow_blank=True, max_length=2000, default="")


class MergeRequest(serializers.Serializer[Any]):
    into = PlainText(max_length=20, help_text="The claim to corroborate (cc-NN).")


class ClaimEventSerializer(FieldsBuiltOnce):
    actor = serializers.SerializerMethodField()

    class Meta:
        model = ClaimEvent
        fields = ("kind", "actor", "note", "at")

    def get_actor(self, event: ClaimEvent) -> str:
        if event.actor_user_id:
            return f"user:{cast('User', event.actor_user).get_username()}"
        if event.actor_token_id:
            return f"token:{cast('ApiToken', event.actor_token).name}"
        if event.actor_agent_id:
            return f"agent:{cast('Agent', event.actor_agent).agent_id}"
        return ""


class ClaimSerializer(WithholdsFlagged):
    id = serializers.CharField(source="public_id", read_only=True)
    superseded_by = serializers.SerializerMethodField()

    def get_superseded_by(self, claim: Claim) -> str | None:
        return cast(Claim, claim.superseded_by).public_id if claim.superseded_by_id else None

    class Meta:
        model = Claim
        fields: tuple[str, ...] = (
            "id",
            "text",
            "type",
            "subject",
            "scope",
            "status",
            "contested",
            "confidence",
            "independent_sessions",
            "created_at",
            "promoted_at",
            "valid_until",
            "superseded_by",
        )


class RankedClaimSerializer(ClaimSerializer):
    rank = serializers.FloatField(read_only=True)
    stale = serializers.BooleanField(
        read_only=True, help_text="Possibly stale: a cited file changed since; ranks lower."
    )

    class Meta(ClaimSerializer.Meta):
        fields = (*ClaimSerializer.Meta.fields, "rank", "stale")


class ClaimDetailSerializer(ClaimSerializer):
    evidence = serializers.SerializerMethodField()
    events = ClaimEventSerializer(many=True, read_only=True)
    near = serializers.SerializerMethodField(
        help_text="The closest other claim and the label for the pair, if one was found."
    )

    class Meta(ClaimSerializer.Meta):
        fields = (*ClaimSerializer.Meta.fields, "evidence", "events", "near")

    def get_evidence(self, claim: Claim) -> list[dict[str, Any]]:
        cited = list(claim.evidence.all())
        verified = lineage.verified_sessions(claim.fleet, [e.session_id for e in cited])
        found = EvidenceSerializer(cited, many=True, context={"verified": verified}).data
        return cast("list[dict[str, Any]]", found)  # many=True: a list; the stub says a dict

    def get_near(self, claim: Claim) -> dict[str, Any] | None:
        if not claim.near_relation or claim.near_claim_id is None:
            return None
        return {
            "claim": cast(Claim, claim.near_claim).public_id,
            "relation": claim.near_relation,
            "similarity": claim.near_similarity,
        }


class SearchRequest(serializers.Serializer[Any]):
    q = PlainText(max_length=500)
    k = serializers.IntegerField(
        required=False,
        default=search.DEFAULT_K,
        min_value=1,
        help_text=f"Clamped to {search.MAX_ROWS}.",
    )
    scope = serializers.ChoiceField(choices=Claim.Scope.values, required=False)
    subject = PlainText(required=False, max_length=200)
    type = serializers.ChoiceField(choices=Claim.Type.values, required=False)
    status = serializers.ChoiceField(
        choices=Claim.Status.values, required=False, help_text="Operators only; others: promoted."
    )


class SearchResponse(serializers.Serializer[Any]):
    enabled = serializers.BooleanField()
    results = RankedClaimSerializer(many=True)
    truncated = serializers.BooleanField()
    note = serializers.CharField(allow_blank=True)


class ProposalResponse(serializers.Serializer[Any]):
    created = serializers.BooleanField(help_text="False: an existing claim was corroborated.")
    evidence_added = serializers.IntegerField()
    redacted = serializers.ListField(
        child=serializers.CharField(), help_text="Kinds of secrets replaced before storing."
    )
    claim = ClaimSerializer()


class TimelineRequest(serializers.Serializer[Any]):
    subject = PlainText(max_length=200)


class TimelineEntrySerializer(FieldsBuiltOnce):
    claim_id = serializers.CharField(source="claim.public_id")
    subject = serializers.CharField(source="claim.subject")
    text = serializers.SerializerMethodField()
    actor = serializers.SerializerMethodField()

    def get_text(self, event: ClaimEvent) -> str:
        return event.claim.for_agents("text")

    class Meta:
        model = ClaimEvent
        fields = ("id", "at", "kind", "claim_id", "subject", "text", "actor", "note")

    def get_actor(self, event: ClaimEvent) -> str:
        return ClaimEventSerializer.get_actor(self, event)  # type: ignore[arg-type]


class ModerationConflict(serializers.Serializer[Any]):
    detail = serializers.CharField()
    code = serializers.ChoiceField(choices=["already_decided", "gate_refused"])
