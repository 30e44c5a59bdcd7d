"""Advisory leases: hold paths for a while, and learn who else is holding overlapping ones.

Nothing here ever refuses a lease because someone else holds an overlapping one. The
answer to "can I edit this?" is "here is who else is there", and the roster shows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from fleet import activity
from fleet.globs import normalise, overlaps
from fleet.models import Agent, Lease, Session

MAX_PATHS_PER_CLAIM = 100
MAX_TTL = timedelta(days=7)


@dataclass(frozen=True)
class Contention:
    mine: Lease
    theirs: Lease


@dataclass(frozen=True)
class ClaimResult:
    held: list[Lease]
    contention: list[Contention]


@dataclass(frozen=True)
class ReleaseResult:
    released: list[Lease]
    not_held: list[str] = field(default_factory=list)


def contention_among(leases: Sequence[Lease]) -> list[Contention]:
    """Every pair of active leases of different agents whose paths overlap (each pair once)."""
    pairs = []
    for i, mine in enumerate(leases):
        for theirs in leases[i + 1 :]:
            if mine.agent_id != theirs.agent_id and overlaps(mine.path, theirs.path):
                pairs.append(Contention(mine, theirs))
    return pairs


@transaction.atomic
def claim_paths(
    agent: Agent,
    paths: Iterable[str],
    *,
    ttl: timedelta | None = None,
    reason: str = "",
    session: Session | None = None,
    now: datetime | None = None,
) -> ClaimResult:
    """Hold (or renew) `paths` for `agent`; report, never refuse, overlapping holders.

    1. Normalise and de-duplicate the paths (BadPath for anything that is not repo-relative).
    2. Upsert one live lease per path: the partial unique constraint on unreleased rows
       makes a replay renew the lease instead of adding a second one.
    3. Compare with the other agents' active leases in the fleet and return the overlaps.
    """
    now = now or timezone.now()
    ttl = min(ttl or timedelta(seconds=agent.fleet.default_lease_ttl_secs), MAX_TTL)
    wanted = list(dict.fromkeys(normalise(p) for p in paths))
    if not wanted or len(wanted) > MAX_PATHS_PER_CLAIM:
        raise ValueError(f"claim between 1 and {MAX_PATHS_PER_CLAIM} paths")
    held = [
        Lease.objects.update_or_create(
            fleet=agent.fleet,
            agent=agent,
            path=path,
            released_at=None,
            defaults={"reason": reason, "expires_at": now + ttl, "session": session},
            create_defaults={
                "reason": reason,
                "expires_at": now + ttl,
                "session": session,
                "acquired_at": now,
            },
        )[0]
        for path in wanted
    ]
    others = Lease.objects.active(at=now).filter(fleet=agent.fleet).exclude(agent=agent)
    others = others.select_related("agent")
    contention = [Contention(m, t) for m in held for t in others if overlaps(m.path, t.path)]
    activity.record(
        agent.fleet, "lease.claimed", agent=agent, paths=wanted, contended=len(contention)
    )
    return ClaimResult(held=held, contention=contention)


@transaction.atomic
def release_paths(
    agent: Agent, paths: Iterable[str] | None = None, *, now: datetime | None = None
) -> ReleaseResult:
    """Release the named paths, or every live lease of `agent` when `paths` is None."""
    now = now or timezone.now()
    live = Lease.objects.select_for_update().filter(
        fleet=agent.fleet, agent=agent, released_at__isnull=True
    )
    not_held: list[str] = []
    if paths is not None:
        wanted = list(dict.fromkeys(normalise(p) for p in paths))
        live = live.filter(path__in=wanted)
        found = set(live.values_list("path", flat=True))
        not_held = [p for p in wanted if p not in found]
    released = list(live)
    Lease.objects.filter(pk__in=[lease.pk for lease in released]).update(released_at=now)
    for lease in released:
        lease.released_at = now
    activity.record(
        agent.fleet,
        "lease.released",
        agent=agent,
        paths=[lease.path for lease in released],
        not_held=not_held,
    )
    return ReleaseResult(released=released, not_held=not_held)


def stale_leases(*, now: datetime | None = None) -> Iterable[Lease]:
    return Lease.objects.expired(at=now)


def expire_leases(*, now: datetime | None = None) -> int:
    """Mark leases past their TTL as released at their expiry time; returns how many."""
    now = now or timezone.now()
    count = 0
    for lease in Lease.objects.expired(at=now).select_related("fleet", "agent"):
        with transaction.atomic():
            won = Lease.objects.filter(pk=lease.pk, released_at__isnull=True).update(
                released_at=lease.expires_at
            )
            if won:
                count += 1
                activity.record(lease.fleet, "lease.expired", agent=lease.agent, path=lease.path)
    return count
