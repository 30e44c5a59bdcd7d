"""What changed in a fleet's snapshot since its last render: the change cursor.

Database triggers (migration claims 0012) write a SnapshotChange row, stamped with the
writing transaction's id, for every change that can alter a snapshot row. A render takes
`cursor()` first, before it reads anything, and stores it with the snapshot it publishes;
the next render asks `since(fleet, that cursor)` for every change NOT VISIBLE in it.

Why no change can be missed, whatever commits when:

1. A change row commits or rolls back with the change itself (same transaction), and is
   stamped with that transaction's id (pg_current_xact_id, 64 bits, never wraps).
2. The cursor is a Postgres snapshot (pg_current_snapshot): it says exactly which
   transaction ids had committed when it was taken, in-progress ones and ones started
   later being "not visible". Unlike a timestamp or a sequence number, a long transaction
   that started before the render and commits after it is not visible in the cursor even
   though its id is smaller: there is no race window to size an overlap for.
3. Every change visible in the cursor had committed before the render's first read, so
   the render (READ COMMITTED, later statements) saw it. Every change not visible in it is
   read again by the next render, even when this render already saw part of it: that is
   the overlap, and it is safe because a render recomputes a claim's rows from the
   claim's current state, never from the change row.
4. Renders of one fleet are serialised (the render lock in ctxlake_site.workers), so the
   cursor chain has no forks; rows older than the cursor's xmin are visible in it and in
   every later one, so the render that stores a cursor may delete them (`prune`).
5. Changes made inside the render's own transaction (tests render inside theirs) are
   never treated as seen: a snapshot does not list its own transaction as in progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

from claims.models import Claim, ClaimEvent, Evidence, SnapshotChange
from fleet.models import Fleet

_NOT_SEEN = """
    xid >= pg_snapshot_xmin(%(cursor)s::pg_snapshot)::text::bigint
    AND (NOT pg_visible_in_snapshot(xid::text::xid8, %(cursor)s::pg_snapshot)
         OR xid = pg_current_xact_id_if_assigned()::text::bigint)
"""


@dataclass
class Changes:
    """The claims whose snapshot rows must be recomputed, and whether only a full
    rebuild will do. `numbers` also names deleted claims (rowids to drop)."""

    claims: set[int] = field(default_factory=set)
    numbers: set[int] = field(default_factory=set)
    full: bool = False


def cursor() -> str:
    """The cursor to store with the render about to be read: take it before any read."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_current_snapshot()::text")
        return str(cur.fetchone()[0])


def since(fleet: Fleet, seen: str) -> Changes:
    """Every change of `fleet` not visible in the cursor `seen`, as claims to recompute."""
    changes = Changes()
    sessions: set[str] = set()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT claim_id, number, session_id, full_render "
            f"FROM claims_snapshotchange WHERE fleet_id = %(fleet)s AND {_NOT_SEEN}",
            {"fleet": fleet.pk, "cursor": seen},
        )
        for claim_id, number, session_id, full in cur.fetchall():
            changes.full |= full
            if claim_id is not None:
                changes.claims.add(claim_id)
            if number is not None:
                changes.numbers.add(number)
            if session_id:
                sessions.add(session_id)
    if sessions:  # a session's outcome shows in the timeline rows that name it
        changes.claims |= _claims_naming(fleet, sessions)
    return changes


def _claims_naming(fleet: Fleet, sessions: set[str]) -> set[int]:
    """Promoted claims with an event or a citation from one of `sessions` (a superset of
    the timeline rows that show the session's outcome: recomputing more is harmless)."""
    promoted = Claim.objects.for_fleet(fleet).promoted()
    cited = Evidence.objects.filter(claim__in=promoted, session_id__in=sessions)
    named = ClaimEvent.objects.filter(claim__in=promoted, data__session__in=sorted(sessions))
    return {*cited.values_list("claim_id", flat=True), *named.values_list("claim_id", flat=True)}


def prune(fleet: Fleet, stored: str) -> int:
    """Delete the fleet's change rows every later cursor will see as old (point 4)."""
    return SnapshotChange.objects.filter(
        fleet_id=fleet.pk, xid__lt=xmin(stored)
    ).delete()[0]


def xmin(stored: str) -> int:
    """The oldest transaction still in progress when the cursor `stored` was taken: every
    change row below it is visible in every later cursor."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_snapshot_xmin(%s::pg_snapshot)::text::bigint", [stored])
        return int(cur.fetchone()[0])
