"""The fleet's roster as the API shows it: active agents, their leases, who overlaps whom.

Read-only, computed from the database (the bridge reads the same picture from the
rendered roster.json). Contention is computed over every active lease of the fleet,
whatever page of leases a caller is looking at.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from fleet.leases import contention_among
from fleet.models import Agent, Fleet, Lease

#: An agent seen this recently counts as active even if it holds nothing.
ACTIVE_WINDOW = timedelta(minutes=30)
MAX_AGENTS = 200


def _overlap(lease: Lease) -> dict[str, Any]:
    return {"agent_id": lease.agent.agent_id, "path": lease.path, "expires_at": lease.expires_at}


def contention_map(fleet: Fleet, *, now: datetime | None = None) -> dict[int, list[dict[str, Any]]]:
    """lease id → the other agents' active leases that overlap it."""
    active = list(Lease.objects.active(at=now).filter(fleet=fleet).select_related("agent"))
    found: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for pair in contention_among(active):
        found[pair.mine.pk].append(_overlap(pair.theirs))
        found[pair.theirs.pk].append(_overlap(pair.mine))
    return dict(found)


def roster(fleet: Fleet, *, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    contention = contention_map(fleet, now=now)
    leases = Lease.objects.active(at=now).filter(fleet=fleet).order_by("path")
    agents = (
        Agent.objects.filter(fleet=fleet)
        .filter(Q(last_seen_at__gte=now - ACTIVE_WINDOW) | Q(leases__in=leases))
        .distinct()
        .order_by("agent_id")
    )
    shown = list(agents[: MAX_AGENTS + 1])
    by_agent: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for lease in leases.filter(agent__in=shown[:MAX_AGENTS]):
        by_agent[lease.agent_id].append(
            {
                "path": lease.path,
                "reason": lease.reason,
                "expires_at": lease.expires_at,
                "contended_by": contention.get(lease.pk, []),
            }
        )
    return {
        "fleet": fleet.slug,
        "memory_mode": fleet.memory_mode,
        "generated_at": now,
        "agents": [
            {
                "agent_id": a.agent_id,
                "runtime": a.runtime,
                "host": a.host,
                "last_seen_at": a.last_seen_at,
                "leases": by_agent.get(a.pk, []),
            }
            for a in shown[:MAX_AGENTS]
        ],
        "contended_leases": len(contention),
        "truncated": len(shown) > MAX_AGENTS,
    }
