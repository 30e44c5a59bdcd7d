"""The fleet's roster as the API shows it: active agents, their leases, who overlaps whom.

Read-only, computed from the database (the bridge reads the same picture from the
rendered roster.json). Contention is found through the literal-prefix index on live
leases (fleet.leases.contended_pairs / overlapping), never by comparing every pair, so a
fleet holding 10k leases answers in milliseconds; `contended_leases` counts over every
active lease of the fleet, whatever part of it a caller is looking at.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from fleet import leases as lease_rules
from fleet.models import Agent, Fleet, Lease

#: An agent seen this recently counts as active even if it holds nothing.
MAX_AGENTS = 200
#: The status lists at most this many leases, each agent's first ones (by path) first, so
#: an agent holding thousands cannot crowd out the others; `truncated` says when more are
#: held, and GET leases pages through all of them.
MAX_LEASES = 500


def _overlap(agent_id: str, path: str, expires_at: datetime) -> dict[str, Any]:
    return {"agent_id": agent_id, "path": path, "expires_at": expires_at}


def contention_map(
    fleet: Fleet, leases: Sequence[Lease], *, now: datetime | None = None
) -> dict[int, list[dict[str, Any]]]:
    """lease id → the other agents' active leases that overlap it, for `leases` (a page)."""
    found: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for pair in lease_rules.overlapping(fleet.pk, leases, now=now or timezone.now()):
        theirs = pair.theirs
        found[pair.mine.pk].append(_overlap(theirs.agent.agent_id, theirs.path, theirs.expires_at))
    return dict(found)


def _partners(
    pairs: Iterable[tuple[int, int]], shown: set[int]
) -> dict[int, list[dict[str, Any]]]:
    """lease id (of `shown`) → its contenders, read by id from the contended pairs."""
    wanted: dict[int, list[int]] = defaultdict(list)
    for a, b in pairs:
        if a in shown:
            wanted[a].append(b)
        if b in shown:
            wanted[b].append(a)
    others = {pk for ids in wanted.values() for pk in ids}
    rows = {
        pk: _overlap(agent_id, path, expires_at)
        for pk, agent_id, path, expires_at in Lease.objects.filter(pk__in=others).values_list(
            "pk", "agent__agent_id", "path", "expires_at"
        )
    }
    return {
        pk: sorted((rows[o] for o in ids), key=lambda r: (r["agent_id"], r["path"]))
        for pk, ids in wanted.items()
    }


# Each agent's first leases by path (a range of the live-lease unique index per agent,
# never all of a hoarder's 10k), then the first of every agent before anyone's second.
_FIRST_LEASES = """
    SELECT l.id, l.agent_id, l.path, l.reason, l.expires_at
    FROM unnest(%s::bigint[]) AS a(id)
    CROSS JOIN LATERAL (
        SELECT id, agent_id, path, reason, expires_at, row_number() OVER (ORDER BY path) AS nth
        FROM fleet_lease
        WHERE fleet_id = %s AND agent_id = a.id AND released_at IS NULL AND expires_at > %s
        ORDER BY path LIMIT %s
    ) l
    ORDER BY l.nth, l.agent_id, l.path
    LIMIT %s
"""


def roster(fleet: Fleet, *, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    live = Lease.objects.active(at=now).filter(fleet=fleet)
    agents = (
        Agent.objects.filter(fleet=fleet)
        .filter(Agent.active(now, live.values("agent_id")))
        .order_by("agent_id")
    )
    shown = list(agents[: MAX_AGENTS + 1])
    with connection.cursor() as cur:
        cur.execute(_FIRST_LEASES, [[a.pk for a in shown[:MAX_AGENTS]], fleet.pk, now,
                                    MAX_LEASES + 1, MAX_LEASES + 1])
        listed = cur.fetchall()
    pairs = lease_rules.contended_pairs(fleet.pk, now=now)
    contended = {pk for pair in pairs for pk in pair}
    partners = _partners(pairs, {row[0] for row in listed[:MAX_LEASES]})
    by_agent: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for pk, agent_pk, path, reason, expires_at in sorted(listed[:MAX_LEASES], key=lambda r: r[2]):
        by_agent[agent_pk].append(
            {
                "path": path,
                "reason": reason,
                "expires_at": expires_at,
                "contended_by": partners.get(pk, []),
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
        "contended_leases": len(contended),
        "truncated": len(shown) > MAX_AGENTS or len(listed) > MAX_LEASES,
    }
