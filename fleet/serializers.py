"""Request and response shapes for the coordination API. Shape and validation only.

These classes neither scrub nor write: free text is scrubbed before it is stored by the
views (fleet/views.py) and fleet.api_presence, with the shared redactor
(mcp_bridge.contract.redact).
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from fleet.globs import BadPath, normalise
from fleet.models import Agent, Handoff, Lease, Session

TEXT_ID = r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$"


class AgentIdField(serializers.RegexField):
    """An agent or session identifier: 1–128 printable characters, no surrounding space."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 128)
        super().__init__(TEXT_ID, **kwargs)


class PlainText(serializers.CharField):
    """Free text without NUL bytes (Postgres refuses them, so they would be a 500)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        if "\x00" in value:
            raise serializers.ValidationError("must not contain NUL characters")
        return value


# -- responses ----------------------------------------------------------------------------


class AgentSerializer(serializers.ModelSerializer[Agent]):
    class Meta:
        model = Agent
        fields = ("agent_id", "runtime", "host", "last_seen_at", "created_at")


class SessionSerializer(serializers.ModelSerializer[Session]):
    agent_id = serializers.CharField(source="agent.agent_id", read_only=True)

    class Meta:
        model = Session
        fields = (
            "session_id",
            "agent_id",
            "repo",
            "branch",
            "started_at",
            "ended_at",
            "outcome",
            "summary",
        )


class OverlapSerializer(serializers.Serializer[Any]):
    agent_id = serializers.CharField()
    path = serializers.CharField()
    expires_at = serializers.DateTimeField()


class LeaseSerializer(serializers.ModelSerializer[Lease]):
    agent_id = serializers.CharField(source="agent.agent_id", read_only=True)
    session_id = serializers.CharField(
        source="session.session_id", read_only=True, allow_null=True, default=None
    )
    contended_by = serializers.SerializerMethodField()

    class Meta:
        model = Lease
        fields = (
            "id",
            "path",
            "agent_id",
            "session_id",
            "reason",
            "acquired_at",
            "expires_at",
            "released_at",
            "contended_by",
        )

    def get_contended_by(self, lease: Lease) -> list[dict[str, Any]]:
        overlaps = self.context.get("contention", {}).get(lease.pk, [])
        return OverlapSerializer(overlaps, many=True).data  # type: ignore[return-value]


class HandoffSerializer(serializers.ModelSerializer[Handoff]):
    from_agent_id = serializers.CharField(source="from_agent.agent_id", read_only=True)
    from_session_id = serializers.CharField(
        source="from_session.session_id", read_only=True, allow_null=True, default=None
    )
    picked_up_by_id = serializers.CharField(
        source="picked_up_by.agent_id", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = Handoff
        fields = (
            "id",
            "from_agent_id",
            "from_session_id",
            "summary",
            "status",
            "next_steps",
            "source_trust",
            "state",
            "picked_up_by_id",
            "picked_up_at",
            "version",
            "created_at",
            "updated_at",
        )


class RosterLeaseSerializer(serializers.Serializer[Any]):
    path = serializers.CharField()
    reason = serializers.CharField()
    expires_at = serializers.DateTimeField()
    contended_by = OverlapSerializer(many=True)


class RosterAgentSerializer(serializers.Serializer[Any]):
    agent_id = serializers.CharField()
    runtime = serializers.CharField()
    host = serializers.CharField()
    last_seen_at = serializers.DateTimeField(allow_null=True)
    leases = RosterLeaseSerializer(many=True)


class StatusSerializer(serializers.Serializer[Any]):
    fleet = serializers.CharField()
    memory_mode = serializers.CharField()
    generated_at = serializers.DateTimeField()
    agents = RosterAgentSerializer(many=True)
    contended_leases = serializers.IntegerField()
    truncated = serializers.BooleanField()


class ContentionSerializer(serializers.Serializer[Any]):
    path = serializers.CharField(help_text="The path you claimed.")
    other_agent_id = serializers.CharField()
    other_path = serializers.CharField()
    other_expires_at = serializers.DateTimeField()


class ClaimResultSerializer(serializers.Serializer[Any]):
    held = LeaseSerializer(many=True)
    contention = ContentionSerializer(many=True)


class ReleaseResultSerializer(serializers.Serializer[Any]):
    released = serializers.ListField(child=serializers.CharField())
    not_held = serializers.ListField(child=serializers.CharField())


class PickupResultSerializer(serializers.Serializer[Any]):
    picked_up = serializers.BooleanField()
    needs_confirmation = serializers.BooleanField()
    message = serializers.CharField()
    handoff = HandoffSerializer()
    transferred_leases = serializers.ListField(
        child=serializers.CharField(),
        help_text="Paths of the leases offered with the handoff that are now yours.",
    )


class VersionConflictSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    expected_version = serializers.IntegerField(allow_null=True)
    current_version = serializers.IntegerField()


# -- requests -----------------------------------------------------------------------------


class ActsForAgent(serializers.Serializer[Any]):
    """Requests that act as an agent: an agent token's own agent, or `agent_id` named."""

    agent_id = AgentIdField(required=False, help_text="Required unless the token has an agent.")


class HeartbeatRequest(ActsForAgent):
    runtime = PlainText(required=False, allow_blank=True, max_length=64, default="")
    host = PlainText(required=False, allow_blank=True, max_length=255, default="")


class SessionStartRequest(ActsForAgent):
    session_id = AgentIdField()
    repo = PlainText(required=False, allow_blank=True, max_length=500, default="")
    branch = PlainText(required=False, allow_blank=True, max_length=255, default="")


class SessionEndRequest(serializers.Serializer[Any]):
    outcome = serializers.ChoiceField(
        choices=[c for c in Session.Outcome.values if c], required=False, default="success"
    )
    summary = PlainText(required=False, allow_blank=True, max_length=4000, default="")
    changed_paths = serializers.ListField(
        child=PlainText(max_length=1024), required=False, default=list, max_length=200,
        help_text="Repo-relative files the session changed: claims citing them at a commit "
        "become possibly stale.",
    )

    def validate_changed_paths(self, value: list[str]) -> list[str]:
        try:
            return list(dict.fromkeys(normalise(p) for p in value))
        except BadPath as exc:
            raise serializers.ValidationError(str(exc)) from exc


class LeaseClaimRequest(ActsForAgent):
    paths = serializers.ListField(child=PlainText(max_length=512), min_length=1, max_length=100)
    reason = PlainText(required=False, allow_blank=True, max_length=500, default="")
    ttl_secs = serializers.IntegerField(
        required=False, min_value=60, max_value=86400, help_text="Defaults to the fleet's TTL."
    )
    session_id = AgentIdField(required=False)


class LeaseReleaseRequest(ActsForAgent):
    paths = serializers.ListField(
        child=PlainText(max_length=512),
        required=False,
        max_length=100,
        help_text="Omit (or send []) to release everything the agent holds.",
    )


class HandoffCreateRequest(ActsForAgent):
    summary = PlainText(max_length=4000)
    status = serializers.ChoiceField(choices=Handoff.Status.values, default="in_progress")
    next_steps = PlainText(required=False, allow_blank=True, max_length=2000, default="")
    session_id = AgentIdField(required=False)


class HandoffUpdateRequest(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    summary = PlainText(required=False, max_length=4000)
    status = serializers.ChoiceField(choices=Handoff.Status.values, required=False)
    next_steps = PlainText(required=False, allow_blank=True, max_length=2000)


class HandoffPickupRequest(ActsForAgent):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    confirm = serializers.BooleanField(
        default=False, help_text="Required for handoffs whose source trust is not operator."
    )
    session_id = AgentIdField(required=False)


class HandoffClearRequest(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
