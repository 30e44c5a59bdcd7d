"""Presence for REST callers: heartbeats and session start/end, as the hooks call them.

The MCP bridge learns nothing about presence (it cannot observe the fleet); hooks and
remote hosts report it over REST. Each change is one function, one transaction, one
Activity row. Free text is scrubbed with the bridge's redactor before it is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import activity, sessions
from fleet.models import Agent, Fleet, Session
from mcp_bridge.contract import redact, screen


class SessionTaken(Exception):
    """The session id already belongs to another agent of the fleet."""


def agent_named(fleet: Fleet, agent_id: str) -> Agent:
    """The fleet's agent with this id, registered on first use (as the drain does)."""
    return Agent.objects.get_or_create(fleet=fleet, agent_id=agent_id)[0]


@transaction.atomic
def heartbeat(
    agent: Agent, *, runtime: str = "", host: str = "", now: datetime | None = None
) -> Agent:
    agent.last_seen_at = now or timezone.now()
    agent.retired_at = None  # back from retirement (fleet.retirement)
    fields = ["last_seen_at", "retired_at"]
    for name, value in (("runtime", runtime), ("host", host)):
        if value:
            setattr(agent, name, redact.scrub_text(value))
            fields.append(name)
    agent.save(update_fields=fields)
    return agent


@transaction.atomic
def start_session(
    agent: Agent, session_id: str, *, repo: str = "", branch: str = ""
) -> tuple[Session, bool]:
    """Open a session (a retried SessionStart hook gets the same one back, created=False)."""
    session, created = Session.objects.get_or_create(
        fleet=agent.fleet,
        session_id=session_id,
        defaults={
            "agent": agent,
            "repo": redact.scrub_text(repo),
            "branch": redact.scrub_text(branch),
        },
    )
    if session.agent_id != agent.pk:
        raise SessionTaken(session_id)
    now = timezone.now()
    sessions.note_sessions_seen(agent.fleet, {session_id: (agent, now, now)})
    heartbeat(agent)
    if created:
        activity.record(agent.fleet, "session.started", target=session, agent=agent)
    return session, created


#: How much earlier than the server first heard of it a session may say it started; an
#: older claim is ignored (a transcript's first timestamp, not a way to rewrite history).
MAX_EARLIER_START = timedelta(days=30)


@transaction.atomic
def end_session(
    session: Session, *, outcome: str, summary: str = "", now: datetime | None = None,
    repo: str = "", branch: str = "", started_at: datetime | None = None,
    changed_paths: Sequence[str] = (), withheld: Sequence[Mapping[str, str]] = (),
) -> Session:
    """Close a session with its outcome; ending it again updates outcome and summary.

    `repo` and `branch` (what the transcript capture found) fill in the session's; an empty
    value keeps what SessionStart recorded. `started_at` (the transcript's first message)
    moves the start earlier, never later: the server first hears of a session at its
    first write, which may be long after the session began. `withheld` lists the capture's
    candidates that the instruction screen held back; each is screened again here and kept
    with its spans for moderators (never proposed, never rendered for agents).
    """
    fields = ["ended_at", "outcome", "summary", "screen_flags", "screen_released_at",
              "screen_released_by"]
    if started_at is not None and session.started_at - MAX_EARLIER_START <= started_at \
            < session.started_at:
        session.started_at = started_at
        fields.append("started_at")
    session.ended_at = session.ended_at or max(now or timezone.now(), session.started_at)
    session.outcome = outcome
    session.summary = redact.scrub_text(summary)
    session.screen_text_fields()
    if changed_paths:
        session.changed_paths = list(changed_paths)
        fields.append("changed_paths")
    if withheld:
        session.capture_withheld = [_withheld(item) for item in withheld]
        fields.append("capture_withheld")
    for name, value in (("repo", repo), ("branch", branch)):
        if value:
            setattr(session, name, redact.scrub_text(value))
            fields.append(name)
    session.save(update_fields=fields)
    activity.record(
        session.fleet, "session.ended", target=session, agent=session.agent, outcome=outcome
    )
    return session


def _withheld(item: Mapping[str, str]) -> dict[str, Any]:
    text = redact.scrub_text(item["text"])
    return {"extractor": item["extractor"], "text": text,
            "spans": screen.screen_text(text).as_list()}

