"""Django's half of the bridge contract for coordination: apply lease.* and handoff.* events.

Each function takes an already-validated envelope (see ctxlake_site.drain) and returns a
small JSON result that the drain records with the event id. A payload the agent got
wrong raises InvalidEvent, which sends the line to the dead-letter file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from fleet import api_presence, handoffs, leases
from fleet.globs import BadPath, normalise
from fleet.models import Agent, Fleet, Handoff, Lease, Session


class InvalidEvent(ValueError):
    """A spool event whose payload cannot be applied; the message is the dead-letter reason."""


@dataclass
class Envelope:
    """The fields every spool event carries, resolved to rows."""

    event_id: str
    kind: str
    fleet: Fleet
    agent: Agent
    session: Session | None
    at: datetime
    payload: dict[str, Any]


def _str_list(payload: dict[str, Any], key: str) -> list[str]:
    value = payload.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidEvent(f"payload.{key} must be a list of strings")
    return value


def _text(payload: dict[str, Any], key: str, *, limit: int, required: bool = False) -> str:
    value = payload.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise InvalidEvent(
            f"payload.{key} must be a non-empty string"
            if required
            else f"payload.{key} must be a string"
        )
    return value.strip()[:limit]


def apply_lease_claim(event: Envelope) -> dict[str, Any]:
    ttl_secs = event.payload.get("ttl_secs")
    if ttl_secs is not None and (
        not isinstance(ttl_secs, int) or isinstance(ttl_secs, bool) or ttl_secs <= 0
    ):
        raise InvalidEvent("payload.ttl_secs must be a positive integer")
    ttl = timedelta(seconds=ttl_secs) if ttl_secs else None
    try:
        result = leases.claim_paths(
            event.agent,
            _str_list(event.payload, "paths"),
            ttl=ttl,
            reason=_text(event.payload, "reason", limit=500),
            session=event.session,
            now=min(event.at, timezone.now()),
        )
    except (BadPath, ValueError) as exc:
        raise InvalidEvent(str(exc)) from exc
    return {
        "held": [lease.path for lease in result.held],
        "contention": [
            {
                "path": c.mine.path,
                "other_agent": c.theirs.agent.agent_id,
                "other_path": c.theirs.path,
            }
            for c in result.contention
        ],
    }


def apply_lease_release(event: Envelope) -> dict[str, Any]:
    paths = _str_list(event.payload, "paths")
    release_all = event.payload.get("all") is True or not paths
    try:
        result = leases.release_paths(event.agent, None if release_all else paths)
    except BadPath as exc:
        raise InvalidEvent(str(exc)) from exc
    return {"released": len(result.released), "not_held": result.not_held}


def apply_handoff_create(event: Envelope) -> dict[str, Any]:
    status = event.payload.get("status", Handoff.Status.IN_PROGRESS)
    if status not in Handoff.Status.values:
        raise InvalidEvent(f"payload.status must be one of {', '.join(Handoff.Status.values)}")
    transfer = event.payload.get("transfer_leases", False)
    if not isinstance(transfer, bool):  # validate before writing: the drain relies on it
        raise InvalidEvent("payload.transfer_leases must be a boolean")
    handoff = handoffs.create_handoff(
        event.agent,
        summary=_text(event.payload, "summary", limit=4000, required=True),
        status=status,
        next_steps=_text(event.payload, "next", limit=2000),
        session=event.session,
        source_trust=Handoff.SourceTrust.AGENT,  # whatever the line claims: it came from an agent
    )
    if not transfer:
        return {"handoff": handoff.pk}
    offered = handoffs.offer_leases(handoff, now=min(event.at, timezone.now()))
    return {"handoff": handoff.pk, "offered": sorted(lease.path for lease in offered)}


def apply_session_end(event: Envelope) -> dict[str, Any]:
    """Close the event's session (the drain created it if this is the first we hear of it)."""
    outcome = event.payload.get("outcome") or ""
    if outcome not in Session.Outcome.values:
        raise InvalidEvent(f"payload.outcome must be one of {', '.join(Session.Outcome.values)}")
    session = event.session
    if session is None:
        raise InvalidEvent("session.end needs the event's session id")
    if session.agent_id != event.agent.pk:
        raise InvalidEvent(f"session {session.session_id} belongs to another agent")
    summary = _text(event.payload, "summary", limit=4000)
    try:
        changed = [normalise(p) for p in _str_list(event.payload, "changed_paths")][:200]
    except BadPath as exc:
        raise InvalidEvent(f"payload.changed_paths: {exc}") from exc
    api_presence.end_session(session, outcome=outcome, summary=summary, now=event.at)
    return {"session": session.session_id, "outcome": outcome or None, "changed_paths": changed}


# -- render: the coordination files of one fleet's cache (docs/cache-format.md) ------------

ACTIVE_WINDOW = timedelta(hours=1)  # an agent seen this recently counts as active
HISTORY_ROWS = 200


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_roster(fleet: Fleet, *, now: datetime) -> dict[str, Any]:
    """Active agents (a live lease, or seen within the window) with their leases, and who
    overlaps whom."""
    live = list(
        Lease.objects.active(at=now)
        .filter(fleet=fleet)
        .select_related("agent")
        .order_by("agent__agent_id", "path")
    )
    agents = {
        a.pk: a
        for a in Agent.objects.filter(fleet=fleet).filter(
            Q(last_seen_at__gte=now - ACTIVE_WINDOW) | Q(pk__in={lease.agent_id for lease in live})
        )
    }
    open_sessions = dict(
        Session.objects.filter(agent__in=agents, ended_at__isnull=True)
        .order_by("agent_id", "started_at")
        .values_list("agent_id", "session_id")
    )
    roster = []
    for agent in sorted(agents.values(), key=lambda a: a.agent_id):
        roster.append(
            {
                "agent_id": agent.agent_id,
                "runtime": agent.runtime,
                "session_id": open_sessions.get(agent.pk),
                "last_seen_at": iso(agent.last_seen_at),
                "leases": [
                    {
                        "path": lease.path,
                        "reason": lease.reason,
                        "acquired_at": iso(lease.acquired_at),
                        "expires_at": iso(lease.expires_at),
                        "offered_with": f"h-{lease.offered_with_id}"
                        if lease.offered_with_id
                        else None,
                    }
                    for lease in live
                    if lease.agent_id == agent.pk
                ],
            }
        )
    contention = [
        {
            "agents": [c.mine.agent.agent_id, c.theirs.agent.agent_id],
            "paths": [c.mine.path, c.theirs.path],
            "expires_at": iso(min(c.mine.expires_at, c.theirs.expires_at)),
        }
        for c in leases.contention_among(live)
    ]
    return {"agents": roster, "contention": contention}


def render_history(fleet: Fleet) -> dict[str, Any]:
    sessions = Session.objects.filter(fleet=fleet).select_related("agent")[:HISTORY_ROWS]
    return {
        "sessions": [
            {
                "session_id": s.session_id,
                "agent_id": s.agent.agent_id,
                "repo": s.repo,
                "started_at": iso(s.started_at),
                "ended_at": iso(s.ended_at),
                "outcome": s.outcome or None,
                "summary": s.summary,
            }
            for s in sessions
        ]
    }


def render_handoffs(fleet: Fleet, *, now: datetime | None = None) -> dict[str, Any]:
    pending = (
        Handoff.objects.filter(fleet=fleet, state=Handoff.State.PENDING)
        .select_related("from_agent", "from_session")
        .order_by("-created_at")
    )
    offered: dict[int, list[str]] = {}
    for handoff_id, path in (
        Lease.objects.active(at=now)
        .filter(fleet=fleet, offered_with__in=pending)
        .order_by("path")
        .values_list("offered_with_id", "path")
    ):
        offered.setdefault(handoff_id, []).append(path)
    return {
        "handoffs": [
            {
                "id": f"h-{h.pk}",
                "from_agent": h.from_agent.agent_id,
                "session_id": h.from_session.session_id if h.from_session else None,
                "status": h.status,
                "summary": h.summary,
                "next": h.next_steps or None,
                "created_at": iso(h.created_at),
                "source_trust": h.source_trust,
                "version": h.version,
                "offered_leases": offered.get(h.pk, []),
            }
            for h in pending
        ]
    }
