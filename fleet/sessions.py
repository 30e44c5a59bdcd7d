"""The sessions the server has seen: one row per (fleet, session id), with its agent and
the first and last moment an event of it arrived.

A Session row is what makes a citation *verified* (fleet.lineage): the fleet has seen that
session, from one of its own agents. Rows are made here and by the REST session hooks
(fleet.api_presence), never from what a citation merely names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from django.db import connection, transaction

from fleet.models import Agent, Fleet, Session

Seen = tuple[Agent, datetime, datetime]  # (agent, first event at, last event at)


def note_sessions_seen(fleet: Fleet, seen: Mapping[str, Seen]) -> dict[str, Session]:
    """Record that `fleet` saw events of each session in `seen`; returns its Session rows.

    A new session is created with its agent and first/last-seen times; a known one has its
    window widened (first moves back, last moves forward, never the other way). A session
    id already held by another agent of the fleet keeps its owner: the event is not
    counted for it, and the returned row says whose it is, so the caller can tell.
    Agents of another fleet are refused (ValueError): a session is one fleet's.
    Three statements, whatever the batch size.
    """
    wanted = {sid: s for sid, s in seen.items() if sid}
    for agent, _, _ in wanted.values():
        if agent.fleet_id != fleet.pk:
            raise ValueError(f"agent {agent.agent_id} is not in fleet {fleet.slug}")
    if not wanted:
        return {}
    with transaction.atomic(savepoint=False):
        return _note(fleet, wanted)


#: Every known session's window widened at once (first back, last forward, never the other
#: way, whatever another drain wrote meanwhile: LEAST and GREATEST skip a NULL). One UPDATE
#: per session cost a drain batch from 200 agents 200 statements.
_WIDEN = """
    UPDATE fleet_session AS s
    SET first_seen_at = LEAST(s.first_seen_at, w.first),
        last_seen_at = GREATEST(s.last_seen_at, w.last)
    FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS w(id, first, last)
    WHERE s.id = w.id
"""


def _note(fleet: Fleet, wanted: Mapping[str, Seen]) -> dict[str, Session]:
    Session.objects.bulk_create(
        [
            Session(
                fleet=fleet,
                agent=agent,
                session_id=sid,
                started_at=first,
                first_seen_at=first,
                last_seen_at=max(first, last),
            )
            for sid, (agent, first, last) in wanted.items()
        ],
        ignore_conflicts=True,  # (fleet, session_id) is unique: known sessions stay as they are
    )
    rows = {
        s.session_id: s
        for s in Session.objects.filter(fleet=fleet, session_id__in=list(wanted)).select_related(
            "agent"
        )
    }
    widened = [
        (row.pk, first, last)
        for sid, (agent, first, last) in wanted.items()
        if (row := rows.get(sid)) is not None and row.agent_id == agent.pk
        # not just created by the insert above
        and (row.first_seen_at, row.last_seen_at) != (first, max(first, last))
    ]
    if widened:
        ids, firsts, lasts = (list(column) for column in zip(*widened, strict=True))
        with connection.cursor() as cur:
            cur.execute(_WIDEN, [ids, firsts, lasts])
    return rows


def note_agents_seen(seen: Mapping[int, datetime]) -> None:
    """Move each agent's last_seen_at (agent pk → when) forward, never back, in one
    statement: the drain notes every agent of a batch at once. A retired agent that
    writes again is back (fleet.retirement)."""
    if not seen:
        return
    rows = [{"id": pk, "at": at.isoformat()} for pk, at in seen.items()]
    table = connection.ops.quote_name(Agent._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            UPDATE {table} AS a SET last_seen_at = s.at, retired_at = NULL
            FROM jsonb_to_recordset(%s::jsonb) AS s(id bigint, at timestamptz)
            WHERE a.id = s.id AND (a.last_seen_at IS NULL OR a.last_seen_at < s.at)
            """,
            [json.dumps(rows)],
        )
