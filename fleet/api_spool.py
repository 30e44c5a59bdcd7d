"""Remote spool upload: validate agents' spool lines against the contract and admit them.

A remote agent host runs the bridge against a local spool and ships the lines here. The
server does not apply them itself: it stores them, validated and scrubbed again, as rows
of the fleet's inbox in Postgres (fleet.inbox), and the drain applies them exactly as it
applies a local bridge's spool lines. One code path applies events; this one only admits
them. Nothing is written to this web host's disk: a drain on any worker host sees the row.

Idempotency by event id, in two layers:
1. Receipt: an Activity row `spool.received` (target_id = the event id) is written for each
   line admitted, in the transaction that inserts its inbox row, so a re-POST of the same
   id (to this web host or another) is answered "accepted" again without a second row. An
   id the drain already applied (AppliedEvent) is accepted without storing it either, and
   the inbox's unique (fleet, event id) settles two hosts admitting one id at once.
2. Apply: the drain records AppliedEvent per event id, so even a line admitted twice (a
   retry racing the drain's delete of the first row) is applied once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from fleet import inbox
from fleet.inbox import InboxFull
from fleet.models import Activity, Agent, AppliedEvent, Fleet, InboxEvent
from fleet.tokens import Speakers
from mcp_bridge import contract
from mcp_bridge.contract import events, redact
from mcp_bridge.contract.spool import MAX_LINE_BYTES

MAX_LINES = 1000
RECEIVED = "spool.received"
EVENT_KEYS = {"v", "id", "kind", "fleet", "agent", "session", "at", "payload"}

__all__ = ["MAX_LINES", "InboxFull", "Outcome", "receive"]


class Invalid(ValueError):
    """One line that does not follow the contract; the message is the reason given back."""


@dataclass
class Outcome:
    accepted: list[str] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)


def parse_line(raw: bytes, fleet: Fleet) -> dict[str, Any]:
    """One spool line → the event, checked against the contract and scrubbed. Whether the
    token may speak for the agent it names is checked for the batch (`_refusals`)."""
    if len(raw) > MAX_LINE_BYTES:
        raise Invalid(f"line is over {MAX_LINE_BYTES} bytes")
    try:
        event = events.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Invalid(f"not JSON: {exc}") from None
    if not isinstance(event, dict):
        raise Invalid("a spool line is a JSON object")
    if set(event) != EVENT_KEYS and not (set(event) == EVENT_KEYS - {"session"}):
        raise Invalid(f"keys must be {', '.join(sorted(EVENT_KEYS))}")
    problem = contract.envelope_problem(event, fleet.slug, fleet_source="the URL's fleet")
    if problem:
        raise Invalid(problem)
    event.setdefault("session", None)
    event = redact.scrub_value(event)
    problem = events.problem(event["kind"], event["payload"])
    if problem:
        raise Invalid(f"payload: {problem}")
    return event  # type: ignore[no-any-return]


def _seen(fleet: Fleet, ids: Iterable[str]) -> tuple[set[str], set[str]]:
    """(ids this fleet already has, ids another fleet's events already use)."""
    ids = list(ids)
    received = set(
        Activity.objects.filter(fleet=fleet, verb=RECEIVED, target_id__in=ids).values_list(
            "target_id", flat=True
        )
    )
    applied = AppliedEvent.objects.filter(event_id__in=ids).values_list("event_id", "fleet_id")
    mine = {str(e) for e, f in applied if f == fleet.pk}
    theirs = {str(e) for e, f in applied if f != fleet.pk}
    waiting = InboxEvent.objects.filter(event_id__in=ids).exclude(fleet=fleet)
    theirs |= {str(e) for e in waiting.values_list("event_id", flat=True)}
    return received | mine, theirs


def _refusals(fleet: Fleet, speakers: Speakers, named: Iterable[str]) -> dict[str, str]:
    """Each named agent the token may not speak for → the reason (at most one query).

    An agent token speaks for its one agent. A host token speaks for its list; an agent id
    no agent of this fleet has is "not an agent of this fleet" whether or not another
    fleet uses it: a token learns nothing about other fleets.
    """
    if speakers.only is None:
        return {}
    named = set(named) - speakers.only
    if speakers.host is None:
        mine = ", ".join(sorted(speakers.only))
        return {agent_id: f"this token speaks for agent {mine}" for agent_id in named}
    known = set(
        Agent.objects.filter(fleet=fleet, agent_id__in=named).values_list("agent_id", flat=True)
    )
    return {
        agent_id: (
            f"agent {agent_id} is not registered for host token {speakers.host!r}; an "
            "operator adds it to the token's agents"
            if agent_id in known
            else f"agent {agent_id} is not an agent of this fleet; a host token relays only "
            "its registered agents"
        )
        for agent_id in named
    }


def receive(fleet: Fleet, raw_lines: list[bytes], *, speakers: Speakers) -> Outcome:
    """Admit spool lines for the drain: the new ones become inbox rows, each with its
    receipt, in one transaction. InboxFull when the fleet's inbox is at its cap.

    Each line stands alone: one refused (the contract, or an agent the token may not speak
    for) is listed with its line number and reason, and the others are still admitted."""
    parsed: list[tuple[int, dict[str, Any]]] = []
    out, events = Outcome(), dict[str, dict[str, Any]]()
    for n, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            parsed.append((n, parse_line(raw, fleet)))
        except Invalid as exc:
            out.rejected.append({"id": _peek_id(raw), "line": n, "reason": str(exc)})
    refused = _refusals(fleet, speakers, (event["agent"] for _, event in parsed))
    for n, event in parsed:
        if event["agent"] in refused:
            out.rejected.append({"id": event["id"], "line": n, "reason": refused[event["agent"]]})
        else:
            events.setdefault(event["id"], event)
    out.rejected.sort(key=lambda r: r["line"])  # in the batch's order, whichever check refused
    with transaction.atomic():
        known, foreign = _seen(fleet, events)
        fresh = [e for i, e in events.items() if i not in known and i not in foreign]
        stored = inbox.admit(fleet, [(e["id"], e["kind"], _line(e)) for e in fresh])
        Activity.objects.bulk_create(
            [
                Activity(
                    fleet=fleet,
                    verb=RECEIVED,
                    target_type="spool.event",
                    target_id=e["id"],
                    data={"kind": e["kind"], "agent": e["agent"]},
                )
                for e in fresh
                if e["id"] in stored
            ]
        )
    for event_id in events:
        if event_id in foreign:
            out.rejected.append({"id": event_id, "line": None, "reason": "duplicate event id"})
        else:
            out.accepted.append(event_id)
    return out


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


def _peek_id(raw: bytes) -> str | None:
    try:
        value = events.loads(raw).get("id")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) and len(value) <= 64 and value.isprintable() else None
