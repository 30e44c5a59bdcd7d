"""Django's half of the bridge contract for coordination: apply lease.* and handoff.* events.

Each function takes an already-validated envelope (see ctxlake_site.drain) and returns a
small JSON result that the drain records with the event id. A payload the agent got
wrong raises InvalidEvent, which sends the line to the dead-letter file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from fleet import handoffs, leases
from fleet.globs import BadPath
from fleet.models import Agent, Fleet, Handoff, Session


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
    handoff = handoffs.create_handoff(
        event.agent,
        summary=_text(event.payload, "summary", limit=4000, required=True),
        status=status,
        next_steps=_text(event.payload, "next", limit=2000),
        session=event.session,
        source_trust=Handoff.SourceTrust.AGENT,  # whatever the line claims: it came from an agent
    )
    return {"handoff": handoff.pk}
