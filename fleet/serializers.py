"""Request and response shapes for the coordination API. Shape and validation only.

A write request (`ContractChecked`) is checked by the very rule the bridge and the drain
apply to the same change (mcp_bridge.contract.events), after its free text is scrubbed
of secrets with the shared redactor; the views get scrubbed values. These classes never
write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from fleet import incidents
from fleet.globs import BadPath, normalise
from fleet.models import Agent, Handoff, Incident, Lease, Session
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import redact

TEXT_ID = r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$"


class AgentIdField(serializers.RegexField):
    """An agent or session identifier: 1–128 printable characters, no surrounding space."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", ev.ID_MAX_CHARS)
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


class StrictInteger(serializers.IntegerField):
    """A JSON integer, not a numeric string or a float: what the spool contract takes."""

    def to_internal_value(self, data: Any) -> int:
        if type(data) is not int:
            raise serializers.ValidationError("must be a JSON integer")
        return super().to_internal_value(data)


class ContractChecked(serializers.Serializer[Any]):
    """A write request that is one spool event kind's change, made over REST.

    `payload()` maps the validated fields to that kind's spool payload; `validate` scrubs
    the free text and asks `events.problem` — the one verdict every front door gives —
    so REST accepts exactly what the bridge would queue and the drain would apply.
    """

    kind: str = ""
    #: spool payload key → request field, where their names differ
    renamed: dict[str, str] = {}

    def payload(self, attrs: dict[str, Any]) -> dict[str, Any]:
        keys = ev.PAYLOAD_KEYS[self.kind]
        fields = {key: self.renamed.get(key, key) for key in keys}
        return {key: attrs[field] for key, field in fields.items() if field in attrs}

    #: the kinds of secret the last validate() replaced by markers (for the answer)
    redacted: list[str] = []

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        sent = self.initial_data if isinstance(self.initial_data, Mapping) else {}
        unknown = sorted(set(sent) - set(self.fields))
        if unknown:  # refused, never dropped: e.g. a proposal carries no `status`
            raise serializers.ValidationError(
                f"unknown field(s) {unknown}; allowed: {sorted(self.fields)}")
        self.redacted = redact.find_secrets(attrs)
        attrs = redact.scrub_value(attrs)
        problem = ev.problem(self.kind, self.payload(attrs))
        if problem:
            raise serializers.ValidationError(problem)
        return attrs


# -- responses ----------------------------------------------------------------------------


class FieldsBuiltOnce(serializers.ModelSerializer[Any]):
    """A ModelSerializer that builds its fields from the model once per class.

    DRF's ModelSerializer.get_fields introspects the model and builds every field again for
    each instance; only the class (its Meta and declared fields) decides the result. Here
    the first instance's fields are kept on the class and each instance gets a deep copy
    (DRF's own way to give an instance fields it may bind). Measured in process
    (2026-12-06, load ≤ 1): a lease claim's answer 290 → 205 µs of CPU, a proposal's
    388 → 266, a handoff's 306 → 202 — paid on every write's response. Two threads that
    build at once store equal fields; either copy serves."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        built = type(self).__dict__.get("_fields_built")
        if built is None:
            built = super().get_fields()
            type(self)._fields_built = built  # type: ignore[attr-defined]
        return copy.deepcopy(built)


class AgentSerializer(FieldsBuiltOnce):
    class Meta:
        model = Agent
        fields = ("agent_id", "runtime", "host", "last_seen_at", "created_at")


class WithholdsFlagged(FieldsBuiltOnce):
    """Output of a screened row (fleet.models.Screened): flagged text no person has released
    is the withheld marker, and `withheld` names those fields — over REST as in the cache,
    whatever the caller's role (operators release it in the admin or over REST first)."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        fields = [f for f in instance.SCREENED_FIELDS if instance.withholds(f) and f in data]
        for name in fields:
            data[name] = instance.for_agents(name)
        if fields:
            data["withheld"] = fields
        return data


class SessionSerializer(WithholdsFlagged):
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
            "changed_paths",
        )


class OverlapSerializer(serializers.Serializer[Any]):
    agent_id = serializers.CharField()
    path = serializers.CharField()
    expires_at = serializers.DateTimeField()


class LeaseSerializer(WithholdsFlagged):
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


class HandoffSerializer(WithholdsFlagged):
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
    repo = PlainText(required=False, allow_blank=True, max_length=ev.REPO_MAX_CHARS, default="")
    branch = PlainText(
        required=False, allow_blank=True, max_length=ev.BRANCH_MAX_CHARS, default=""
    )


class SessionEndRequest(ContractChecked):
    kind = ev.KIND_SESSION_END

    outcome = serializers.ChoiceField(
        choices=[c for c in Session.Outcome.values if c], required=False, default="success"
    )
    summary = PlainText(
        required=False, allow_blank=True, max_length=ev.SUMMARY_MAX_CHARS, default=""
    )
    changed_paths = serializers.ListField(
        child=PlainText(max_length=ev.PATH_MAX_CHARS), required=False, default=list,
        max_length=ev.CHANGED_PATHS_MAX,
        help_text="Repo-relative files the session changed: claims citing them at a commit "
        "become possibly stale.",
    )
    repo = PlainText(required=False, allow_blank=True, max_length=ev.REPO_MAX_CHARS, default="")
    branch = PlainText(
        required=False, allow_blank=True, max_length=ev.BRANCH_MAX_CHARS, default=""
    )
    started_at = serializers.CharField(
        required=False, max_length=ev.INSTANT_MAX_CHARS,
        help_text="When the session began (ISO 8601, from its transcript); checked, not stored.",
    )

    def validate_changed_paths(self, value: list[str]) -> list[str]:
        try:
            return list(dict.fromkeys(normalise(p) for p in value))
        except BadPath as exc:
            raise serializers.ValidationError(str(exc)) from exc


class LeaseClaimRequest(ActsForAgent, ContractChecked):
    kind = ev.KIND_LEASE_CLAIM
    paths = serializers.ListField(
        child=PlainText(max_length=ev.PATH_MAX_CHARS), min_length=1, max_length=ev.PATHS_MAX
    )
    reason = PlainText(
        required=False, allow_blank=True, max_length=ev.REASON_MAX_CHARS, default=""
    )
    ttl_secs = StrictInteger(
        required=False, min_value=ev.TTL_MIN_SECS, max_value=ev.TTL_MAX_SECS,
        help_text="Defaults to the fleet's TTL.",
    )
    session_id = AgentIdField(required=False)


class LeaseReleaseRequest(ActsForAgent, ContractChecked):
    kind = ev.KIND_LEASE_RELEASE
    paths = serializers.ListField(
        child=PlainText(max_length=ev.PATH_MAX_CHARS),
        required=False,
        max_length=ev.PATHS_MAX,
        help_text="Omit (or send []) to release everything the agent holds.",
    )


class HandoffCreateRequest(ActsForAgent, ContractChecked):
    kind = ev.KIND_HANDOFF_CREATE
    renamed = {"next": "next_steps"}
    summary = PlainText(max_length=ev.SUMMARY_MAX_CHARS)
    status = serializers.ChoiceField(choices=Handoff.Status.values, default="in_progress")
    next_steps = PlainText(
        required=False, allow_blank=True, max_length=ev.NEXT_MAX_CHARS, default=""
    )
    session_id = AgentIdField(required=False)


class HandoffUpdateRequest(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    summary = PlainText(required=False, max_length=ev.SUMMARY_MAX_CHARS)
    status = serializers.ChoiceField(choices=Handoff.Status.values, required=False)
    next_steps = PlainText(required=False, allow_blank=True, max_length=ev.NEXT_MAX_CHARS)


class HandoffPickupRequest(ActsForAgent):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    confirm = serializers.BooleanField(
        default=False, help_text="Required for handoffs whose source trust is not operator."
    )
    session_id = AgentIdField(required=False)


class HandoffClearRequest(serializers.Serializer[Any]):
    version = serializers.IntegerField(min_value=1, max_value=2**31 - 1)


class IncidentPartySerializer(serializers.Serializer[Any]):
    agent_id = serializers.CharField()
    session_id = serializers.CharField(allow_null=True)


class IncidentSerializer(serializers.Serializer[Any]):
    """An incident exactly as the fleet's webhook receives it (fleet.incidents.as_json):
    one outside shape, whichever door."""

    id = serializers.CharField(help_text='"i-12": how agents see it.')
    fleet = serializers.CharField()
    kind = serializers.ChoiceField(choices=Incident.Kind.choices)
    paths = serializers.ListField(child=serializers.CharField())
    actor = IncidentPartySerializer(help_text="The agent whose act it was.")
    holder = IncidentPartySerializer(
        allow_null=True, help_text="The agent whose lease or handoff it touched (told of it).")
    detail = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField()
    text = serializers.CharField(help_text="The one line agents are told.")

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return incidents.as_json(instance)
