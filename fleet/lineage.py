"""Independent sessions: how many separate lines of reasoning back a set of sessions.

Sessions joined by a handoff chain (S1 hands off, S2 picks up, S2 hands off, S3 picks up)
are one line of reasoning continued, not independent witnesses: they count once. The
chain may run through sessions that are not themselves in the set, so the whole fleet's
handoff graph is considered.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.models import Fleet, Handoff


def independent_sessions(fleet: Fleet, session_ids: Iterable[str]) -> int:
    """Count connected components of `session_ids` under the fleet's handoff links."""
    wanted = {sid for sid in session_ids if sid}
    if len(wanted) <= 1:
        return len(wanted)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    links = Handoff.objects.filter(
        fleet=fleet, from_session__isnull=False, picked_up_session__isnull=False
    ).values_list("from_session__session_id", "picked_up_session__session_id")
    for a, b in links:
        parent[find(a)] = find(b)
    return len({find(sid) for sid in wanted})
