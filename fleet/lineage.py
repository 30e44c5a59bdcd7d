"""Independent sessions: how many separate, *verified* lines of reasoning back a claim.

A cited session counts only if this fleet has seen it from one of its own agents (a
Session row of the fleet, see fleet.sessions): a session id an agent merely types, or one
of another fleet, is kept with the citation and shown as unverified, never counted.

Sessions joined by a handoff chain (S1 hands off, S2 picks up, S2 hands off, S3 picks up)
are one line of reasoning continued, not independent witnesses: they count once. The
chain may run through sessions that are not themselves in the set, so the whole fleet's
handoff graph is considered.

`independent_sessions` is the one count: the promotion gate, the stored
`Claim.independent_sessions` agents are shown, the admin and REST all use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from django.db.models import F, QuerySet

from fleet.models import Fleet, Handoff, Session


def _seen(fleet: Fleet, session_ids: Iterable[str]) -> QuerySet[Session]:
    wanted = {sid for sid in session_ids if sid}
    return Session.objects.filter(fleet=fleet, session_id__in=wanted, agent__fleet_id=F("fleet_id"))


def verified_sessions(fleet: Fleet, session_ids: Iterable[str]) -> set[str]:
    """Those of `session_ids` the fleet has seen, from one of its own agents."""
    return set(_seen(fleet, session_ids).values_list("session_id", flat=True))


def verified_session_rows(fleet: Fleet, session_ids: Iterable[str]) -> dict[str, Session]:
    """The Session rows (with their agents) of the verified ones among `session_ids`."""
    return {s.session_id: s for s in _seen(fleet, session_ids).select_related("agent")}


def independent_sessions(fleet: Fleet, session_ids: Iterable[str]) -> int:
    """Count connected components of the verified `session_ids` under handoff links."""
    (count,) = independent_counts(fleet, [list(session_ids)])
    return count


def independent_counts(fleet: Fleet, groups: Sequence[Iterable[str]]) -> list[int]:
    """`independent_sessions` for each group of cited session ids, in two queries in all
    (the verified ids, the handoff links) however many groups: a drain batch proposes
    hundreds of claims at once."""
    groups = [{sid for sid in group if sid} for group in groups]
    verified = verified_sessions(fleet, set().union(*groups)) if groups else set()
    wanted = [cast("set[str]", group) & verified for group in groups]  # sets, made above
    if all(len(group) <= 1 for group in wanted):
        return [len(group) for group in wanted]
    find = _components(fleet)
    return [len({find(sid) for sid in group}) for group in wanted]


def independent_among_verified(fleet: Fleet, wanted: set[str]) -> int:
    """`independent_sessions` for ids already known to be verified (saves the lookup)."""
    if len(wanted) <= 1:
        return len(wanted)
    find = _components(fleet)
    return len({find(sid) for sid in wanted})


def _components(fleet: Fleet) -> Callable[[str], str]:
    """A union-find over the fleet's handoff links: `find(session_id)` names its chain."""
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
    return find
