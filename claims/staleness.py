"""Staleness: a claim whose evidence cites a file at a commit may be outdated once a later
session of the fleet reports that file changed.

"Reports" means what the fleet can observe without reading anyone's repository: a lease
claim by another session covering the path (it is about to change it), or — once the
session end endpoint carries them — the paths a session says it changed. Either way the
claim is only *possibly* stale: it keeps its status and text, ranks lower (× (1 −
staleness) in mcp_bridge.contract.ranking) and shows POSSIBLY STALE, until a moderator looks.

Only citations with both `path` and `commit` count: a path without a commit pins no
version, so there is nothing to be stale against.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from django.db import connection, transaction
from django.db.models import Q

from claims.models import Claim
from fleet import activity
from fleet.globs import BadPath, covers, in_start_ranges, literal_prefix, start_ranges
from fleet.models import Agent, Fleet, Session
from fleet.signals import PathReport
from mcp_bridge.contract import ranking, screen

POSSIBLY_STALE = ranking.STALE_DEFAULT  # 0.5: halves the score, never hides the claim
LIVE_STATUSES = (Claim.Status.PROPOSED, Claim.Status.PROMOTED)
#: The live claims readers see as possibly stale (search's `stale`, the snapshot's flag):
#: a filter on Claim, for counting them.
STALE_Q = Q(status__in=LIVE_STATUSES, staleness__gt=0)


_VERSIONED = "e.path <> '' AND e.commit <> ''"  # the partial index claims_evidence_versioned
_CITATION = "e.claim_id, e.path, e.session_id, e.created_at"
_LIVE_IN_FLEET = "c.fleet_id = %(fleet)s AND c.status = ANY(%(statuses)s)"
_EVERY_CITED = f"""
    SELECT {_CITATION} FROM claims_evidence e JOIN claims_claim c ON c.id = e.claim_id
    WHERE {_LIVE_IN_FLEET} AND {_VERSIONED}
"""
_VERSIONED_CITATIONS = f"SELECT {_CITATION} FROM claims_evidence e WHERE {_VERSIONED}"
# The citations in the ranges first, a range scan of the versioned citations' index each,
# then their claims. Left to join freely, Postgres started from the fleet's claims when
# its statistics held few of them (a drain's new fleet): 2 ms for the first batch of
# pipeline_bench, 89 ms by the tenth, against 1 ms.
_CITED_IN_RANGES = f"""
    WITH e AS MATERIALIZED (
        SELECT e.* FROM {in_start_ranges(_VERSIONED_CITATIONS, "e.path")} e
    )
    SELECT {_CITATION} FROM e JOIN claims_claim c ON c.id = e.claim_id
    WHERE {_LIVE_IN_FLEET}
"""


def _prefix(pattern: str) -> str | None:
    try:
        return literal_prefix(pattern).rstrip("/")
    except BadPath:
        return None


def cited_under(fleet: Fleet, patterns: Iterable[str]) -> list[tuple[int, str, str, datetime]]:
    """(claim id, path, session id, cited at) of the fleet's live claims' versioned
    citations (path + commit) that one of `patterns` may cover, by literal prefix.

    Hand-written SQL: it runs for every batch of lease claims the drain applies, and the
    ORM query cost more to build than to run. Callers check `covers` per pattern.
    """
    prefixes = {p for p in map(_prefix, patterns) if p is not None}
    if not prefixes:
        return []
    params: dict[str, Any] = {"fleet": fleet.pk, "statuses": list(LIVE_STATUSES)}
    ranges = start_ranges(prefixes)
    if ranges is None:  # a pattern with no literal prefix ("**") may cover any path
        sql = _EVERY_CITED
    else:
        sql = _CITED_IN_RANGES
        params.update(ranges._asdict())
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cast("list[tuple[int, str, str, datetime]]", cur.fetchall())


def mark_changed_paths(
    fleet: Fleet,
    paths: Iterable[str],
    *,
    at: datetime,
    session: Session | None = None,
    agent: Agent | None = None,
    source: str = "lease.claim",
) -> list[Claim]:
    """Mark possibly stale the claims citing (path, commit) under `paths`; returns them."""
    (marked,) = mark_reported_changes(
        fleet, [PathReport(list(paths), at, session, agent, source)]
    )
    return marked


@transaction.atomic(savepoint=False)  # inside the drain's batch: no savepoint per event
def mark_reported_changes(fleet: Fleet, reports: Sequence[PathReport]) -> list[list[Claim]]:
    """For each report in order, the claims it newly marks possibly stale.

    1. Find, in one query, the versioned citations any report's paths may cover; a
       citation counts for a report when a path covers it, it was cited before the
       report's time, and by a different session (changing a file you cited is not news).
    2. Raise each such claim's staleness to POSSIBLY_STALE (never lower it: a finer
       estimate set elsewhere wins), in one UPDATE; the first report to hit a claim marks
       it, as if the reports had come one by one.
    3. One Activity row per newly marked claim, naming the paths and who reported them.
    """
    rows = cited_under(fleet, {p for report in reports for p in report.paths})
    hits: list[dict[int, set[str]]] = []
    for report in reports:
        own = report.session.session_id if report.session else None
        found: dict[int, set[str]] = {}
        for pattern in dict.fromkeys(report.paths):
            for claim_id, path, session_id, cited_at in rows:
                if cited_at < report.at and session_id != own and covers(pattern, path):
                    found.setdefault(claim_id, set()).add(path)
        hits.append(found)
    every = {claim_id for found in hits for claim_id in found}
    if not every:
        return [[] for _ in reports]
    fresh = Claim.objects.filter(pk__in=every, staleness__lt=POSSIBLY_STALE).in_bulk()
    Claim.objects.filter(pk__in=fresh).update(staleness=POSSIBLY_STALE)
    marked: list[list[Claim]] = []
    for report, found in zip(reports, hits, strict=True):
        mine = [fresh.pop(pk) for pk in sorted(found) if pk in fresh]
        for claim in mine:
            claim.staleness = POSSIBLY_STALE
            claim.stale_since = since_phrase(report, sorted(found[claim.pk]))
            activity.record(
                fleet,
                "claim.possibly_stale",
                target=claim,
                agent=report.agent,
                claim=claim.public_id,
                paths=sorted(found[claim.pk]),
                source=report.source,
                session=report.session.session_id if report.session else None,
            )
        marked.append(mine)
    Claim.objects.bulk_update([c for claims in marked for c in claims], ["stale_since"])
    return marked


def since_phrase(report: PathReport, paths: list[str]) -> str:
    """What marked a claim possibly stale, for agents and moderators: "bo changed
    src/x.py" or "bo leased src/x/**" (the first path, and how many more)."""
    who = report.agent.agent_id if report.agent else "an agent"
    did = "leased" if report.source == "lease.claim" else "changed"
    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
    phrase = f"{who} {did} {paths[0]}{more}"[:300]
    # agents read it: a path that reads as an order is not repeated to them
    return f"{who} {did} {len(paths)} path(s)" if screen.screen_text(phrase).flagged else phrase


def on_paths_reported(
    sender: object, *, fleet: Fleet, reports: list[PathReport], **_: Any
) -> list[list[str]]:
    """The receiver of fleet.signals.paths_reported (connected in ClaimsConfig.ready)."""
    return [[c.public_id for c in marked] for marked in mark_reported_changes(fleet, reports)]
