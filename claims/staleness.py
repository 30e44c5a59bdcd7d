"""Staleness: a claim whose evidence cites a file at a commit may be outdated once a later
session of the fleet reports that file changed.

"Reports" means what the fleet can observe without reading anyone's repository: a lease
claim by another session covering the path (it is about to change it), or — once the
session end endpoint carries them — the paths a session says it changed. Either way the
claim is only *possibly* stale: it keeps its status and text, ranks lower (× (1 −
staleness) in mcp_bridge.ranking) and shows POSSIBLY STALE, until a moderator looks.

Only citations with both `path` and `commit` count: a path without a commit pins no
version, so there is nothing to be stale against.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection, transaction

from claims.models import Claim, Evidence
from fleet import activity
from fleet.globs import BadPath, covers, like_pattern, literal_prefix
from fleet.models import Agent, Fleet, Session
from mcp_bridge import ranking

POSSIBLY_STALE = ranking.STALE_DEFAULT  # 0.5: halves the score, never hides the claim
LIVE_STATUSES = (Claim.Status.PROPOSED, Claim.Status.PROMOTED)


_CITED = """
    SELECT e.claim_id, e.path, e.session_id, e.created_at
    FROM claims_evidence e JOIN claims_claim c ON c.id = e.claim_id
    WHERE c.fleet_id = %s AND c.status = ANY(%s) AND e.path <> '' AND e.commit <> ''
      AND e.path LIKE %s ESCAPE '\\'
"""


def cited_under(fleet: Fleet, pattern: str) -> list[Evidence]:
    """Versioned citations (path + commit) of the fleet's live claims that `pattern` covers.

    Hand-written SQL: it runs for every lease claim the drain applies, and the ORM query
    cost more to build than to run. The claims are loaded only for the (rare) hits.
    """
    try:
        prefix = literal_prefix(pattern).rstrip("/")
    except BadPath:
        return []
    like = like_pattern(prefix)
    with connection.cursor() as cur:
        cur.execute(_CITED, [fleet.pk, list(LIVE_STATUSES), like])
        rows = [r for r in cur.fetchall() if _covers(pattern, r[1])]
    claims = Claim.objects.in_bulk({r[0] for r in rows}) if rows else {}
    return [
        Evidence(claim=claims[claim_id], path=path, session_id=session_id, created_at=at)
        for claim_id, path, session_id, at in rows
    ]


def _covers(pattern: str, path: str) -> bool:
    try:
        return covers(pattern, path)
    except BadPath:
        return False


@transaction.atomic(savepoint=False)  # inside the drain's batch: no savepoint per event
def mark_changed_paths(
    fleet: Fleet,
    paths: Iterable[str],
    *,
    at: datetime,
    session: Session | None = None,
    agent: Agent | None = None,
    source: str = "lease.claim",
) -> list[Claim]:
    """Mark possibly stale the claims citing (path, commit) under `paths`; returns them.

    1. Find versioned citations covered by any of the paths, cited before `at` and by a
       different session (a session changing the file it just cited is not news).
    2. Raise each such claim's staleness to POSSIBLY_STALE (never lower it: a finer
       estimate set elsewhere wins), in one UPDATE.
    3. One Activity row per newly marked claim, naming the paths and who reported them.
    """
    hits: dict[int, tuple[Claim, set[str]]] = {}
    own = session.session_id if session else None
    for pattern in dict.fromkeys(paths):
        for ev in cited_under(fleet, pattern):
            if ev.created_at < at and ev.session_id != own:
                hits.setdefault(ev.claim_id, (ev.claim, set()))[1].add(ev.path)
    if not hits:
        return []
    fresh = set(
        Claim.objects.filter(pk__in=hits, staleness__lt=POSSIBLY_STALE).values_list("pk", flat=True)
    )
    Claim.objects.filter(pk__in=fresh).update(staleness=POSSIBLY_STALE)
    marked = []
    for pk in sorted(fresh):
        claim, cited = hits[pk]
        claim.staleness = POSSIBLY_STALE
        activity.record(
            fleet,
            "claim.possibly_stale",
            target=claim,
            agent=agent,
            claim=claim.public_id,
            paths=sorted(cited),
            source=source,
            session=own,
        )
        marked.append(claim)
    return marked
