"""Retiring idle agents: an agent not seen for its fleet's `retire_idle_hours` has its
leases released and is marked retired (one Activity row naming what was released, and an
incident, fleet.incidents, so the fleet and its webhook hear of it), so a
crashed or abandoned session stops holding paths until its TTLs run out; the agent's next
write brings it back (fleet.sessions.note_agents_seen, api_presence clear `retired_at`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from fleet import activity, incidents, leases, rendering
from fleet.models import Agent, Fleet


def idle(fleet: Fleet, now: datetime) -> list[Agent]:
    """The fleet's unretired agents not seen within its idle window (none if it is 0)."""
    if not fleet.retire_idle_hours:
        return []
    since = now - timedelta(hours=fleet.retire_idle_hours)
    return list(Agent.objects.filter(fleet=fleet, retired_at__isnull=True)
                .filter(Q(last_seen_at__lt=since) | Q(last_seen_at__isnull=True,
                                                      created_at__lt=since)))


def retire_idle_agents(now: datetime) -> list[Agent]:
    """Retire every fleet's idle agents; returns them. Each in its own transaction."""
    retired = []
    for fleet in Fleet.objects.exclude(retire_idle_hours=0):
        mine = [agent for agent in idle(fleet, now) if _retire(agent, now)]
        if mine:
            rendering.request_render(fleet)
        retired += mine
    return retired


@transaction.atomic
def _retire(agent: Agent, now: datetime) -> bool:
    won = Agent.objects.filter(pk=agent.pk, retired_at__isnull=True).update(retired_at=now)
    if not won:
        return False
    released = leases.release_paths(agent, None, now=now)
    activity.record(agent.fleet, "agent.retired", agent=agent,
                    idle_since=agent.last_seen_at.isoformat() if agent.last_seen_at else None,
                    released=sorted(ls.path for ls in released.released),
                    window_hours=agent.fleet.retire_idle_hours)
    incidents.record_retirement(agent, released=sorted(ls.path for ls in released.released),
                                at=now)
    return True
