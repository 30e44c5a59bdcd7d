"""Handoffs: create, pick up (through the pickup gate), clear — all compare-and-swap.

Every change names the version it was based on. If someone else changed the handoff in
the meantime, the caller gets a `Conflict` carrying the current version instead of
silently overwriting their change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from fleet import activity
from fleet.models import Agent, Handoff, Lease, Session
from mcp_bridge.contract import events


@dataclass(frozen=True)
class Conflict:
    """The handoff moved on: `current_version` is what the caller should re-read and retry."""

    handoff_id: int
    expected_version: int
    current_version: int


@dataclass(frozen=True)
class NeedsConfirmation:
    """The pickup gate: a handoff not written by an operator is data, not an instruction."""

    handoff_id: int
    source_trust: str
    message: str


class NotPending(Exception):
    """Only a pending handoff can be picked up."""


#: Activity verbs of a pickup or clear the drain could not apply (the agent is told through
#: the roster's refused_handoffs; a REST caller gets its 409 at once instead).
PICKUP_REFUSED = "handoff.pickup_refused"
CLEAR_REFUSED = "handoff.clear_refused"


def create_handoff(
    agent: Agent,
    *,
    summary: str,
    status: str = Handoff.Status.IN_PROGRESS,
    next_steps: str = "",
    session: Session | None = None,
    source_trust: str = Handoff.SourceTrust.AGENT,
) -> Handoff:
    (handoff,) = create_handoffs(
        [
            Handoff(
                fleet=agent.fleet,
                from_agent=agent,
                from_session=session,
                summary=summary,
                status=status,
                next_steps=next_steps,
                source_trust=source_trust,
            )
        ]
    )
    return handoff


def create_handoffs(handoffs: list[Handoff]) -> list[Handoff]:
    """Insert unsaved handoffs in one statement, each with its `handoff.created` activity
    and the instruction screen's verdict on its summary and next steps."""
    for handoff in handoffs:
        handoff.screen_text_fields()
    with transaction.atomic(savepoint=False):
        Handoff.objects.bulk_create(handoffs)
        for handoff in handoffs:
            activity.record(
                handoff.fleet, "handoff.created", target=handoff, agent=handoff.from_agent
            )
    return handoffs


@transaction.atomic(savepoint=False)  # one UPDATE: inside a caller's transaction, no savepoint
def update_handoff(
    handoff: Handoff, *, expected_version: int, **changes: Any
) -> Handoff | Conflict:
    """Apply `changes` only if the row is still at `expected_version`; bump the version.

    When `handoff` was read at that version, the row it now is is this copy plus `changes`:
    they are set here instead of reading the row again. A refresh would also drop the
    related rows the caller loaded with it (a REST view's select_related), which the
    answer's serializer then read back one query each: four statements, a third of a
    clear's CPU (2026-12-05 profile). The copy is right because every write to the row
    moves `version` on, not only this one: a trigger (migration fleet 0019) bumps it for a
    text release, an admin save and a deleted session's SET_NULL alike.
    """
    now = timezone.now()
    won = Handoff.objects.filter(pk=handoff.pk, version=expected_version).update(
        **changes, version=F("version") + 1, updated_at=now
    )
    if not won:
        current = Handoff.objects.filter(pk=handoff.pk).values_list("version", flat=True).first()
        return Conflict(handoff.pk, expected_version, current if current is not None else 0)
    if handoff.version != expected_version or any(
        hasattr(value, "resolve_expression") for value in changes.values()
    ):
        handoff.refresh_from_db()
        return handoff
    for name, value in changes.items():
        setattr(handoff, name, value)
    handoff.version, handoff.updated_at = expected_version + 1, now
    return handoff


@transaction.atomic
def offer_leases(handoff: Handoff, *, now: datetime | None = None) -> list[Lease]:
    """Offer the sender's active leases with `handoff`: they move to whoever picks it up.

    Until then they stay the sender's (the roster still shows them as held), and an offer
    nobody takes up simply expires with the lease's own TTL.
    """
    offered = list(
        Lease.objects.active(at=now or timezone.now())
        .select_for_update()
        .filter(fleet=handoff.fleet, agent=handoff.from_agent)
    )
    Lease.objects.filter(pk__in=[lease.pk for lease in offered]).update(offered_with=handoff)
    if offered:
        paths = sorted(lease.path for lease in offered)
        activity.record(
            handoff.fleet, "lease.offered", target=handoff, agent=handoff.from_agent, paths=paths
        )
    return offered


_TAKE_OVER = """
    INSERT INTO fleet_lease (fleet_id, agent_id, session_id, path, prefix, reason, acquired_at,
                             expires_at, screen_flags, screen_released_at, screen_released_by_id)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s)
    ON CONFLICT (fleet_id, agent_id, path) WHERE released_at IS NULL
    DO UPDATE SET expires_at = GREATEST(fleet_lease.expires_at, EXCLUDED.expires_at)
    RETURNING id
"""


def _transfer_offered(
    handoff: Handoff,
    *,
    to: Agent,
    session: Session | None,
    now: datetime,
) -> list[str]:
    """Move the leases offered with `handoff` to `to`; the caller holds the transaction.

    1. Lock the offered rows that are still live (released or expired offers stay put,
       so an offer nobody could take up in time just expires with its TTL).
    2. Release the sender's rows.
    3. Upsert one row per path for the picker with the original expiry (the remaining
       TTL). The partial unique index `fleet_lease_one_per_key` arbitrates: a picker who
       already holds that path keeps one row, with the later of the two expiries.
    """
    offered = list(Lease.objects.active(at=now).select_for_update().filter(offered_with=handoff))
    if not offered:
        return []
    Lease.objects.filter(pk__in=[lease.pk for lease in offered]).update(released_at=now)
    with connection.cursor() as cur:
        for lease in offered:
            cur.execute(
                _TAKE_OVER,
                [
                    lease.fleet_id,
                    to.pk,
                    session.pk if session else None,
                    lease.path,
                    lease.prefix,
                    lease.reason,
                    now,
                    lease.expires_at,
                    json.dumps(lease.screen_flags),  # the reason's verdict moves with it
                    lease.screen_released_at,
                    lease.screen_released_by_id,
                ],
            )
    paths = sorted(lease.path for lease in offered)
    activity.record(
        handoff.fleet,
        "lease.transferred",
        target=handoff,
        agent=to,
        paths=paths,
        from_agent=handoff.from_agent.agent_id,
    )
    return paths


# the pickup and the lease transfer commit together or not at all; inside a caller's
# transaction (fleet.actions') that is the caller's, with no savepoint of its own
@transaction.atomic(savepoint=False)
def pick_up_handoff(
    handoff: Handoff,
    *,
    by: Agent,
    expected_version: int,
    session: Session | None = None,
    confirm: bool = False,
    now: datetime | None = None,
) -> Handoff | Conflict | NeedsConfirmation:
    """Take over a pending handoff, and with it any leases offered with it.

    A handoff whose source trust is not `operator` was written by an agent (or ingested):
    picking it up means acting on another model's words, so it needs `confirm=True`, and
    without it the answer says so and nothing changes.
    """
    gate = events.pickup_gate(handoff.source_trust, confirm)
    if gate is not None:
        return NeedsConfirmation(handoff.pk, handoff.source_trust, gate)
    if handoff.state != Handoff.State.PENDING:
        raise NotPending(handoff.pk)
    result = update_handoff(
        handoff,
        expected_version=expected_version,
        state=Handoff.State.PICKED_UP,
        picked_up_by=by,
        picked_up_session=session,
        picked_up_at=now or timezone.now(),
    )
    if isinstance(result, Handoff):
        activity.record(handoff.fleet, "handoff.picked_up", target=handoff, agent=by)
        result.transferred_paths = _transfer_offered(
            result, to=by, session=session, now=result.picked_up_at or timezone.now()
        )
    return result


def clear_handoff(
    handoff: Handoff, *, expected_version: int, by: Agent | None = None, user: Any = None
) -> Handoff | Conflict:
    result = update_handoff(handoff, expected_version=expected_version, state=Handoff.State.CLEARED)
    if isinstance(result, Handoff):
        activity.record(handoff.fleet, "handoff.cleared", target=handoff, agent=by, user=user)
    return result
