"""The server tier's spool: spool lines received over REST, kept in Postgres until applied.

Web hosts share nothing but Postgres and Redis, so a line one of them accepts must be
where every worker host's drain can see it. `admit` stores accepted lines (one row per
fleet and event id); `claim` hands a drain the oldest rows of a fleet, locked, for it to
apply and delete in the same transaction (ctxlake_site.drain).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, Min
from django.db.models.functions import Length

from fleet.models import Fleet, InboxEvent

_TABLE = connection.ops.quote_name(InboxEvent._meta.db_table)

#: Unapplied rows one fleet may hold; past it an upload is refused (503, retry later),
#: as a full spool directory refuses a local bridge's append. About the spool's 64 MiB cap
#: at a typical line's size.
MAX_PENDING = 50_000


class InboxFull(Exception):
    """The fleet's inbox is at MAX_PENDING; the message says what the caller can do."""


def admit(fleet: Fleet, rows: Sequence[tuple[str, str, bytes]]) -> set[str]:
    """Store (event id, kind, line) rows for the drain; returns the ids that were new.

    An id this fleet's inbox already holds is left as it is (ON CONFLICT DO NOTHING): of two
    web hosts admitting the same id at once, the unique index makes one wait for the
    other and then store nothing. InboxFull when the fleet is at its cap.
    """
    if not rows:
        return set()
    pending = pending_count(fleet)
    if pending + len(rows) > MAX_PENDING:
        raise InboxFull(
            f"The server's inbox for this fleet holds {pending} unapplied event(s); the cap "
            f"is {MAX_PENDING}. The drain (qcluster) is behind or stopped; nothing was "
            "queued. Retry later."
        )
    with connection.cursor() as cur:
        cur.execute(
            f"""
            INSERT INTO {_TABLE} (fleet_id, event_id, kind, line, received_at)
            SELECT %s, e.id, e.kind, e.line, now()
            FROM unnest(%s::uuid[], %s::text[], %s::bytea[]) AS e(id, kind, line)
            ON CONFLICT (fleet_id, event_id) DO NOTHING
            RETURNING event_id
            """,
            [fleet.pk, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
        )
        return {str(row[0]) for row in cur.fetchall()}


def claim(fleet: Fleet, limit: int, budget: int) -> list[InboxEvent]:
    """The fleet's oldest rows no other transaction holds, locked until this one ends: at
    most `limit`, stopping once their lines hold `budget` bytes (the row that reaches it
    included), so a batch's memory is bounded whatever the lines' sizes.

    Must run inside the transaction that applies and deletes them: a worker killed before
    COMMIT releases its locks with its connection, and the rows are claimed again. Rows
    locked past the budget are left to the next batch.
    """
    assert transaction.get_connection().in_atomic_block, "claim() locks until COMMIT"
    sizes = (
        InboxEvent.objects.filter(fleet=fleet)
        .order_by("id")
        .select_for_update(skip_locked=True)
        .values_list("id", Length("line"))[:limit]
    )
    ids: list[int] = []
    size = 0
    for pk, length in sizes:
        if size >= budget:
            break
        ids.append(pk)
        size += length
    return list(InboxEvent.objects.filter(pk__in=ids).order_by("id"))


def delete(rows: Sequence[InboxEvent]) -> None:
    """Remove applied (or dead-lettered, or duplicate) rows: in the applying transaction."""
    InboxEvent.objects.filter(pk__in=[row.pk for row in rows]).delete()


def fleets_waiting() -> list[int]:
    """Ids of the fleets with rows in the inbox."""
    return sorted(InboxEvent.objects.values_list("fleet_id", flat=True).distinct())


def pending_count(fleet: Fleet) -> int:
    return InboxEvent.objects.filter(fleet=fleet).count()


def backlog(fleet: Fleet) -> tuple[int, datetime | None]:
    """How many rows wait for the drain, and when the oldest was received (one query)."""
    found = InboxEvent.objects.filter(fleet=fleet).aggregate(n=Count("id"), at=Min("received_at"))
    return found["n"], found["at"]


#: The advisory lock class of "draining this fleet's inbox" (a two-key lock: this, fleet id).
_DRAIN_LOCK_CLASS = 0x696E6278  # "inbx"


def lock_fleet(fleet: Fleet) -> bool:
    """Take the fleet's inbox for this transaction, or False if another drain holds it.

    One drain per fleet at a time keeps a fleet's events in receipt order (an agent's
    release before its next claim of the same path); SKIP LOCKED alone would let two
    workers apply consecutive batches of one fleet side by side.
    """
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_try_advisory_xact_lock(%s::int, %s::int)", [_DRAIN_LOCK_CLASS, fleet.pk]
        )
        return bool(cur.fetchone()[0])
