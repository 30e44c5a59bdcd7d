"""The coordination files of one fleet's cache: roster, history, handoffs (docs/cache-format.md).

Pure reads of the fleet's rows into the JSON the bridge serves; ctxlake_site.workers
writes them atomically.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from fleet import handoffs, incidents, leases
from fleet.models import Activity, Agent, Fleet, Handoff, Lease, Screened, Session
from mcp_bridge.contract import events

HISTORY_ROWS = 200
REFUSALS_SHOWN = 5  # per agent, in roster.json's refused_claims and refused_handoffs
CLOSED_SHOWN = 20  # handoffs.json's recently closed handoffs
CHANGED_PATHS_SHOWN = 20  # per session, in history.json
INCIDENTS_SHOWN = events.INCIDENTS_SHOWN  # per holder, in roster.json's agents[].incidents
INCIDENTS_LISTED = 50  # roster.json's fleet-wide incidents (the briefing shows the first)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_roster(fleet: Fleet, *, now: datetime) -> dict[str, Any]:
    """Active agents (a live lease, or seen within the window) with their leases, and who
    overlaps whom (found through the prefix index: 10k live leases render in well under
    a second, where comparing every pair took 29 s)."""
    leases_now = Lease.objects.active(at=now).filter(fleet=fleet)
    live = list(
        leases_now.order_by("agent__agent_id", "path").values_list(
            "pk", "agent_id", "agent__agent_id", "path", "reason", "acquired_at", "expires_at",
            "offered_with_id", *Lease.SCREEN_VERDICT,
        )
    )  # rows, not model instances: building 10k Lease objects cost more than the rest
    # The holders as a subquery and the agents as rows: a list of hundreds of pks as
    # parameters, and an Agent object each, were ~30 % of a 200-agent roster's CPU.
    active = Agent.objects.filter(fleet=fleet).filter(
        Agent.active(now, leases_now.values("agent_id")))
    agents = sorted(active.values_list("pk", "agent_id", "runtime", "last_seen_at"),
                    key=lambda row: row[1])  # by agent id, as Python orders text
    open_sessions = dict(
        Session.objects.filter(agent__in=active.values("pk"), ended_at__isnull=True)
        .order_by("agent_id", "started_at")
        .values_list("agent_id", "session_id")
    )
    held = _held_by_agent(live)
    refused = _refused_claims(fleet, now)
    refused_handoffs = _refused_handoffs(fleet, now)
    recent = incidents.recent(fleet, now)
    told = _incidents_by_holder(recent)
    roster = [
        {
            "agent_id": agent_id,
            "runtime": runtime,
            "session_id": open_sessions.get(pk),
            "last_seen_at": iso(last_seen_at),
            "leases": held.get(pk, []),
            **({"refused_claims": refused[pk]} if pk in refused else {}),
            **({"refused_handoffs": refused_handoffs[pk]} if pk in refused_handoffs else {}),
            **({"incidents": told[agent_id]} if agent_id in told else {}),
        }
        for pk, agent_id, runtime, last_seen_at in agents
    ]
    return {"agents": roster, "contention": _contention(fleet, live, now),
            "incidents": recent[:INCIDENTS_LISTED]}


def _incidents_by_holder(recent: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """holder agent id → the incidents it is told about (newest first, INCIDENTS_SHOWN at
    most): what its bridge notes once in its next tool answer and fleet_status lists
    under `yours`. Incidents without a holder (a retirement) are in the fleet-wide list."""
    told: dict[str, list[dict[str, Any]]] = {}
    for item in recent:
        mine = told.setdefault(item["holder"], []) if item["holder"] else None
        if mine is not None and len(mine) < INCIDENTS_SHOWN:
            mine.append({k: v for k, v in item.items() if k != "holder"})
    return told


def _held_by_agent(live: list[tuple[Any, ...]]) -> dict[int, list[dict[str, Any]]]:
    """agent pk → its live leases as the roster shows them (a flagged reason withheld)."""
    held: dict[int, list[dict[str, Any]]] = {}
    for _, agent_pk, agent_id, path, reason, acquired_at, expires_at, offered_with, flags, \
            released in live:
        held.setdefault(agent_pk, []).append(
            {
                "path": path,
                "reason": Lease.shown(reason, flags, released, "reason", agent_id),
                "acquired_at": iso(acquired_at),
                "expires_at": iso(expires_at),
                "offered_with": events.handoff_ref(offered_with) if offered_with else None,
            }
        )
    return held


def _contention(fleet: Fleet, live: list[tuple[Any, ...]], now: datetime) -> list[dict[str, Any]]:
    """Each overlapping pair of live leases once, the earlier (by agent, path) first."""
    position = {row[0]: i for i, row in enumerate(live)}
    pairs = sorted(
        (min(position[a], position[b]), max(position[a], position[b]))
        for a, b in leases.contended_pairs(fleet.pk, now=now)
        if a in position and b in position
    )
    return [
        {
            "agents": [live[i][2], live[j][2]],
            "paths": [live[i][3], live[j][3]],
            "expires_at": iso(min(live[i][6], live[j][6])),
        }
        for i, j in pairs
    ]


def _refused_claims(fleet: Fleet, now: datetime) -> dict[int, list[dict[str, Any]]]:
    """agent pk → its lease claims the per-agent cap refused within the window, newest
    first (at most REFUSALS_SHOWN): how an agent whose claim went through the spool
    learns, from fleet_status, that it holds nothing new and why."""
    found: dict[int, list[dict[str, Any]]] = {}
    recent = (
        Activity.objects.filter(fleet=fleet, verb=leases.REFUSED, at__gte=now - Agent.ACTIVE_WINDOW)
        .order_by("-at")
        .values_list("agent_id", "at", "data")[:200]
    )
    for agent_pk, at, data in recent:
        shown = found.setdefault(agent_pk, [])
        if len(shown) < REFUSALS_SHOWN:
            shown.append(
                {
                    "paths": data.get("paths", []),
                    "at": iso(at),
                    "reason": f"the agent held {data.get('live')} live lease(s); the cap is "
                    f"{data.get('cap')} per agent. Release leases no longer needed, or claim "
                    "a directory or glob instead of many files.",
                }
            )
    return found


_HANDOFF_REFUSALS = {handoffs.PICKUP_REFUSED: "pickup", handoffs.CLEAR_REFUSED: "clear"}


def _refused_handoffs(fleet: Fleet, now: datetime) -> dict[int, list[dict[str, Any]]]:
    """agent pk → its pickups and clears the drain refused within the window, newest first
    (at most REFUSALS_SHOWN): the bridge said "queued", and this is where the agent
    learns that nothing changed, and why."""
    found: dict[int, list[dict[str, Any]]] = {}
    recent = (
        Activity.objects.filter(fleet=fleet, verb__in=_HANDOFF_REFUSALS,
                                at__gte=now - Agent.ACTIVE_WINDOW)
        .order_by("-at")
        .values_list("agent_id", "verb", "at", "data")[:200]
    )
    for agent_pk, verb, at, data in recent:
        shown = found.setdefault(agent_pk, [])
        if len(shown) < REFUSALS_SHOWN:
            shown.append({"handoff": data.get("handoff"), "action": _HANDOFF_REFUSALS[verb],
                          "at": iso(at), "reason": data.get("reason")})
    return found


# The columns the history and handoffs files show, read as values: a session row also holds
# what capture withheld, and model instances of the rows and of their agents and sessions
# cost four times as much, for every pending handoff and recent session of every render.
_SESSION_SHOWN = ("session_id", "agent__agent_id", "repo", "branch", "started_at",
                  "ended_at", "outcome", "summary", "changed_paths", *Session.SCREEN_VERDICT)
_HANDOFF_SHOWN = ("pk", "from_agent__agent_id", "from_session__session_id", "status",
                  "summary", "next_steps", "created_at", "source_trust", "version",
                  *Handoff.SCREEN_VERDICT)


def render_history(fleet: Fleet) -> dict[str, Any]:
    """Recent sessions; a summary the instruction screen flagged is the withheld marker
    (and `withheld` names it) until a person releases it."""
    sessions = Session.objects.filter(fleet=fleet).values(*_SESSION_SHOWN)[:HISTORY_ROWS]
    return {
        "sessions": [
            {
                "session_id": s["session_id"],
                "agent_id": s["agent__agent_id"],
                "repo": s["repo"],
                "branch": s["branch"] or None,
                "started_at": iso(s["started_at"]),
                "ended_at": iso(s["ended_at"]),
                "outcome": s["outcome"] or None,
                "summary": Session.text_shown(s, "summary", s["agent__agent_id"]),
                "changed_paths": s["changed_paths"][:CHANGED_PATHS_SHOWN],
                **_withheld(Session, s),
            }
            for s in sessions
        ]
    }


def _withheld(model: type[Screened], row: dict[str, Any]) -> dict[str, list[str]]:
    """{"withheld": [fields]} for a row whose flagged text agents must not see, else {}."""
    fields = [f for f in model.SCREENED_FIELDS
              if model.withheld(row["screen_flags"], row["screen_released_at"], f)]
    return {"withheld": fields} if fields else {}


def render_handoffs(fleet: Fleet, *, now: datetime | None = None) -> dict[str, Any]:
    pending = Handoff.objects.filter(fleet=fleet, state=Handoff.State.PENDING)
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
                "id": events.handoff_ref(h["pk"]),
                "from_agent": h["from_agent__agent_id"],
                "session_id": h["from_session__session_id"],
                "status": h["status"],
                "summary": Handoff.text_shown(h, "summary", h["from_agent__agent_id"]),
                "next": Handoff.text_shown(h, "next_steps", h["from_agent__agent_id"]) or None,
                **_withheld(Handoff, h),
                "created_at": iso(h["created_at"]),
                "source_trust": h["source_trust"],
                "version": h["version"],
                "offered_leases": offered.get(h["pk"], []),
            }
            for h in pending.order_by("-created_at").values(*_HANDOFF_SHOWN)
        ],
        "closed": _closed_handoffs(fleet, now or timezone.now()),
    }


def _closed_handoffs(fleet: Fleet, now: datetime) -> list[dict[str, Any]]:
    """Handoffs picked up or cleared within the window, newest first: how a bridge tells an
    agent asking for one that it is gone, and to whom, without queueing a doomed pickup."""
    closed = (
        Handoff.objects.filter(fleet=fleet, updated_at__gte=now - Agent.ACTIVE_WINDOW)
        .exclude(state=Handoff.State.PENDING)
        .select_related("picked_up_by")
        .order_by("-updated_at")[:CLOSED_SHOWN]
    )
    return [
        {
            "id": events.handoff_ref(h.pk),
            "state": h.state,
            "picked_up_by": h.picked_up_by.agent_id if h.picked_up_by else None,
            "at": iso(h.updated_at),
            "version": h.version,
        }
        for h in closed
    ]
