"""Coordination writes from agents, one function per change, whoever delivered it.

The REST views and the spool drain's appliers both call these, so a lease claimed over
REST and one claimed through the bridge's spool leave the same rows, the same activity,
the same staleness marks and the same render request. Each action is one transaction:
the domain write (leases, handoffs, api_presence), its audit rows (written by those),
its follow-ups — paths announced through `signals.report_paths`, whose receivers (the
claims app's staleness marks) run inside the same transaction — and a render of the
fleet's cache requested for after the commit.

Idempotency: the drain records each spool event's id itself (AppliedEvent, per batch);
a REST caller may send an `Idempotency-Key` (see fleet.idempotency) for the same effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import activity, api_presence, handoffs, incidents, leases, rendering, signals
from fleet.globs import BadPath
from fleet.handoffs import Conflict, NeedsConfirmation, NotPending
from fleet.leases import ClaimRequest, LeaseCapReached, ReleaseRequest
from fleet.models import Agent, Fleet, Handoff, Lease, Session

# What callers (REST views, the drain) pass in and get back, named here so that they
# reach the domain through this module alone (an import contract checks the views).
__all__ = [
    "ClaimRequest", "Claimed", "Conflict", "Ended", "LeaseCapReached", "NeedsConfirmation",
    "NotPending", "ReleaseRequest", "claim_leases", "clear_handoff", "create_handoffs",
    "end_session", "pick_up_handoff", "refuse_handoff_change", "release_leases",
]


@dataclass(frozen=True)
class Claimed:
    """A lease claim's result and the claims it made possibly stale (public ids)."""

    result: leases.ClaimResult
    possibly_stale: list[str] = field(default_factory=list)


Refused = ValueError | leases.LeaseCapReached


def claim_leases(
    fleet: Fleet, requests: Sequence[leases.ClaimRequest]
) -> list[Claimed | ValueError | leases.LeaseCapReached]:
    """Hold (or renew) paths for each request, in order; per refused request a ValueError
    (malformed) or LeaseCapReached (well formed, but past the agent's cap)."""
    with transaction.atomic(savepoint=False):
        results = leases.claim_many(fleet.pk, requests)
        held = [
            (q, r) for q, r in zip(requests, results, strict=True) if not isinstance(r, Refused)
        ]
        reports = [
            signals.PathReport([lease.path for lease in r.held], q.now or timezone.now(),
                               q.session, q.agent)
            for q, r in held
        ]
        marks = signals.report_paths(claim_leases, fleet, reports)
        if held:
            rendering.request_render(fleet)
    stale = iter(marks)
    return [r if isinstance(r, Refused) else Claimed(r, next(stale)) for r in results]


def release_leases(
    fleet: Fleet, requests: Sequence[leases.ReleaseRequest], *, now: datetime | None = None
) -> list[leases.ReleaseResult | BadPath]:
    """Release named paths, or everything an agent holds, for each request in order."""
    with transaction.atomic(savepoint=False):
        results = leases.release_many(fleet.pk, requests, now=now)
        if any(not isinstance(r, BadPath) and r.released for r in results):
            rendering.request_render(fleet)
    return results


def create_handoffs(
    fleet: Fleet, notes: Sequence[tuple[Handoff, datetime | None]]
) -> list[tuple[Handoff, list[Lease] | None]]:
    """Insert unsaved handoffs; one paired with a time offers its author's leases as of then."""
    with transaction.atomic(savepoint=False):
        created = handoffs.create_handoffs([handoff for handoff, _ in notes])
        out = [
            (handoff, None if offer_at is None else handoffs.offer_leases(handoff, now=offer_at))
            for handoff, (_, offer_at) in zip(created, notes, strict=True)
        ]
        if out:
            rendering.request_render(fleet)
    return out


def pick_up_handoff(
    handoff: Handoff, *, by: Agent, expected_version: int, session: Session | None = None,
    confirm: bool = False, now: datetime | None = None,
) -> Handoff | Conflict | NeedsConfirmation:
    """Take over a pending handoff and the leases offered with it (fleet.handoffs has the
    gate: agent-written handoffs need `confirm`); NotPending if it is not pending. A
    pickup changes the roster and the leases every agent sees: a render follows."""
    with transaction.atomic(savepoint=False):
        result = handoffs.pick_up_handoff(
            handoff, by=by, expected_version=expected_version, session=session,
            confirm=confirm, now=now,
        )
        if isinstance(result, Handoff):
            rendering.request_render(handoff.fleet)
    return result


def clear_handoff(
    handoff: Handoff, *, expected_version: int, by: Agent | None = None, user: Any = None
) -> Handoff | Conflict:
    """Mark a handoff cleared (compare-and-swap on its version); a render follows."""
    with transaction.atomic(savepoint=False):
        result = handoffs.clear_handoff(
            handoff, expected_version=expected_version, by=by, user=user
        )
        if isinstance(result, Handoff):
            rendering.request_render(handoff.fleet)
    return result


def refuse_handoff_change(
    fleet: Fleet, *, by: Agent, verb: str, ref: str, reason: str, handoff: Handoff | None = None,
    session: Session | None = None,
) -> None:
    """Record a pickup or clear that arrived through the spool and could not be applied.

    A REST caller learns of a refusal from its answer; a bridge's agent was told "queued"
    long before the drain ran, so the refusal is kept (an activity row the roster renders
    as the agent's `refused_handoffs`) and a render is requested so that it reaches the
    agent's next fleet_status. A refused pickup is also an incident told to whoever holds
    the handoff (its taker, else its author).
    """
    with transaction.atomic(savepoint=False):
        activity.record(fleet, verb, target=handoff, agent=by, handoff=ref, reason=reason)
        if verb == handoffs.PICKUP_REFUSED:
            holder = None if handoff is None else handoff.picked_up_by or handoff.from_agent
            incidents.record_refused_pickup(
                fleet, actor=by, actor_session=session.session_id if session else "",
                holder=None if holder is None or holder.pk == by.pk else holder,
                reason=f"{ref}: {reason}")
        rendering.request_render(fleet)


@dataclass(frozen=True)
class Ended:
    session: Session
    changed_paths: list[str]
    possibly_stale: list[str] = field(default_factory=list)


def end_session(
    session: Session, *, outcome: str, summary: str, changed_paths: Sequence[str],
    now: datetime | None = None, repo: str = "", branch: str = "",
    started_at: datetime | None = None, withheld: Sequence[Mapping[str, str]] = (),
) -> Ended:
    """Close a session with its outcome; the files it says it changed mark citing claims
    and are kept on the row (the briefing lists them)."""
    with transaction.atomic(savepoint=False):
        session = api_presence.end_session(
            session, outcome=outcome, summary=summary, now=now, repo=repo, branch=branch,
            started_at=started_at, changed_paths=changed_paths, withheld=withheld,
        )
        report = signals.PathReport(
            list(changed_paths), session.ended_at or now or timezone.now(), session, session.agent,
            source="session.end",
        )
        (marked,) = signals.report_paths(end_session, session.fleet, [report])
        rendering.request_render(session.fleet)
    return Ended(session, list(changed_paths), marked)
