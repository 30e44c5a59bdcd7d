"""snapshot.sqlite and the claims of the briefing and lease recall (docs/cache-format.md).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np

from claims import contradictions, search, tallies
from claims.models import Claim, ClaimEvent, Evidence
from fleet.cache_render import iso
from fleet.models import Fleet, Session
from mcp_bridge import contract
from mcp_bridge.contract import embed, ranking, render

BRIEFING_CLAIMS = 5


def _claim_row(claim: Claim, paths: list[str], repos: list[str], conflicts: list[str],
               ) -> tuple[Any, ...]:
    return (
        claim.public_id,
        claim.for_agents("text"),  # promotion needs a release; a later redact may flag
        claim.type,
        claim.subject,
        claim.scope,
        claim.status,
        claim.confidence,
        int(claim.contested),
        claim.independent_sessions,
        iso(claim.created_at),
        iso(claim.promoted_at),
        iso(claim.valid_until),
        cast(Claim, claim.superseded_by).public_id if claim.superseded_by_id else None,
        int(claim.staleness > 0),
        claim.staleness,
        json.dumps(paths, ensure_ascii=False),
        json.dumps(repos, ensure_ascii=False),
        tallies.why(claim, brief=True),
        claim.stale_since if claim.staleness > 0 else "",
        json.dumps(conflicts),
    )


CLAIM_COLUMNS = (
    "id",
    "text",
    "type",
    "subject",
    "scope",
    "status",
    "confidence",
    "contested",
    "independent_sessions",
    "created_at",
    "promoted_at",
    "valid_until",
    "superseded_by",
    "stale",
    "staleness",
    "evidence_paths",
    "repos",
    "why",
    "stale_since",
    "conflicts",
)


def write_snapshot(fleet: Fleet, tmp: Path, *, generated_at: datetime) -> int:
    """Build the fleet's snapshot in `tmp` (never the live file); returns the claim count.

    Only promoted claims are written, superseded and expired ones included (the bridge
    leaves those out of default results). Vectors are written only when they were made
    by the embedder the manifest names.
    """
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    try:
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA synchronous = OFF")  # the file is fsynced once, before publishing
        create_tables(db)
        count = write_claims(db, fleet)
        write_timeline(db, fleet)
        db.executemany("INSERT INTO meta VALUES (?, ?)", meta(fleet, generated_at, count))
        db.execute(contract.SNAPSHOT_FTS_REBUILD)
        db.commit()
    finally:
        db.close()
    return count


def create_tables(db: sqlite3.Connection) -> None:
    for ddl in contract.SNAPSHOT_DDL:
        db.execute(ddl)


def meta(fleet: Fleet, generated_at: datetime, count: int) -> list[tuple[str, str]]:
    """The snapshot's meta rows (before it is sealed with its version and digest)."""
    values = {
        "format_version": contract.FORMAT_VERSION,
        "fleet": fleet.slug,
        "generated_at": iso(generated_at),
        "memory_mode": fleet.memory_mode,
        "embedder_name": embed.NAME,
        "embedder_dims": embed.DIMS,
        "claim_count": count,
    }
    return [(k, str(v)) for k, v in values.items()]


def write_claims(db: sqlite3.Connection, fleet: Fleet, only: Collection[int] | None = None,
                 ) -> int:
    """Write the fleet's promoted claims (those of `only`, claim pks, when given) and their
    vectors; how many. The one definition of a claim's snapshot rows: a full render and a
    delta render (claims.snapshot_update) both write them here."""
    if only is not None and not only:
        return 0  # a delta with no claim to recompute (a lease or handoff change alone)
    claims = (
        Claim.objects.for_fleet(fleet).promoted().select_related("superseded_by").order_by("number")
    )
    if only is not None:
        claims = claims.filter(pk__in=list(only))
    paths, repos = _cited(Evidence.objects.filter(claim__in=claims))
    conflicts = contradictions.open_by_claim(fleet)
    placeholders = ", ".join("?" * (len(CLAIM_COLUMNS) + 1))
    sql = f"INSERT INTO claims (rowid, {', '.join(CLAIM_COLUMNS)}) VALUES ({placeholders})"
    count = 0
    # rowid = the claim's per-fleet number, stable across renders: an unchanged claim is
    # the same row in every snapshot, so a delta (mcp_bridge.contract.delta) names only
    # the claims that changed
    for claim in claims.iterator(chunk_size=2000):
        rowid = claim.number
        db.execute(sql, (rowid, *_claim_row(claim, paths.get(claim.pk, []),
                                            repos.get(claim.pk, []),
                                            conflicts.get(claim.pk, []))))
        if claim.embedding is not None and claim.embedding_model == embed.NAME:
            vector = np.asarray(claim.embedding, dtype="<f4")
            if vector.shape == (embed.DIMS,):
                db.execute("INSERT INTO embeddings VALUES (?, ?)", (rowid, vector.tobytes()))
        count += 1
    return count


def _cited(evidence: Any) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """claim pk → the paths its evidence cites (sorted), and → the repositories its
    evidence comes from, by name ("acme/shop"; in citation order)."""
    paths: dict[int, set[str]] = {}
    repos: dict[int, list[str]] = {}
    for claim_id, path, repo in evidence.values_list("claim_id", "path", "repo").order_by("pk"):
        if path:
            paths.setdefault(claim_id, set()).add(path)
        name = render.repo_name(repo) if repo else ""
        if name and name not in repos.setdefault(claim_id, []):
            repos[claim_id].append(name)
    return {k: sorted(v) for k, v in paths.items()}, repos


def write_timeline(db: sqlite3.Connection, fleet: Fleet, only: Collection[int] | None = None,
                   ) -> None:
    """Events of promoted claims only (of `only`, claim pks, when given): an unmoderated
    claim's text never reaches agents. Each entry names the session it came from (the
    event's, else the first evidence's for a proposal or corroboration) and how that
    session ended."""
    if only is not None and not only:
        return
    events = (
        ClaimEvent.objects.filter(claim__fleet=fleet, claim__status=Claim.Status.PROMOTED)
        .select_related("claim", "actor_user", "actor_agent")
        .order_by("at", "pk")
    )
    if only is not None:
        events = events.filter(claim_id__in=list(only))
    first_cited = _first_sessions(fleet, only)
    listed = [(event, _event_session(event, first_cited))
              for event in events.iterator(chunk_size=2000)]
    sessions = Session.objects.filter(fleet=fleet).exclude(outcome="")
    if only is not None:
        sessions = sessions.filter(session_id__in={s for _, s in listed if s})
    outcomes = dict(sessions.values_list("session_id", "outcome"))
    rows = [
        (
            event.pk,  # stable rowid across renders (see write_claims)
            event.claim.subject,
            iso(event.at),
            event.kind,
            event.claim.public_id,
            session,
            _actor_name(event),
            event.claim.for_agents("text") if event.kind != "edited" else "claim text edited",
            outcomes.get(session) if session else None,
        )
        for event, session in listed
    ]
    db.executemany(
        "INSERT INTO timeline (rowid, subject, at, kind, claim_id, session_id, actor, "
        "summary, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def _actor_name(event: ClaimEvent) -> str | None:
    if event.actor_agent:
        return event.actor_agent.agent_id
    return event.actor_user.get_username() if event.actor_user else None


def _event_session(event: ClaimEvent, first_cited: dict[int, str]) -> str | None:
    """The session an event came from: the one it names, else for an agent's proposal or
    corroboration the session its claim was first cited from; a person's decision has none."""
    named = (event.data or {}).get("session") if isinstance(event.data, dict) else None
    if isinstance(named, str) and named:
        return named
    if event.kind in (ClaimEvent.Kind.PROPOSED, ClaimEvent.Kind.CORROBORATED):
        return first_cited.get(event.claim_id)
    return None


def _first_sessions(fleet: Fleet, only: Collection[int] | None = None) -> dict[int, str]:
    """claim pk → the session id of its earliest evidence (promoted claims of the fleet)."""
    rows = Evidence.objects.filter(claim__fleet=fleet, claim__status=Claim.Status.PROMOTED)
    if only is not None:
        rows = rows.filter(claim_id__in=list(only))
    first: dict[int, str] = {}
    for claim_id, session_id in rows.order_by("claim_id", "created_at", "pk").values_list(
        "claim_id", "session_id"
    ):
        first.setdefault(claim_id, session_id)
    return first


def briefing_claims(
    fleet: Fleet, *, now: datetime, exclude: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The few promoted claims a session should start with, in attribution-ready form."""
    claims = (
        _live(fleet, now)
        .exclude(number__in=[int(i.split("-")[1]) for i in exclude])
        .order_by("-confidence", "-independent_sessions", "-promoted_at")[:BRIEFING_CLAIMS]
    )
    chosen = list(claims)
    _, repos = _cited(Evidence.objects.filter(claim__in=chosen))
    conflicts = contradictions.open_by_claim(fleet)
    return [_briefing_row(c, repos.get(c.pk, []), conflicts.get(c.pk, [])) for c in chosen]


def path_claims(
    fleet: Fleet, patterns: Iterable[str], *, now: datetime, k: int = BRIEFING_CLAIMS
) -> list[dict[str, Any]]:
    """Promoted claims about the paths leased now, best first (the bridge's fleet_claim
    recall, computed with the same mcp_bridge.contract.ranking functions)."""
    patterns = list(dict.fromkeys(patterns))
    if not patterns:
        return []
    # Matching needs a claim's subject and cited paths only; the rows of the few that match
    # are read after. Reading every live claim whole was 40 % of a render's CPU at 1,000
    # claims and 1,000 leases, where none matched.
    live = _live(fleet, now)
    subjects = dict(live.values_list("pk", "subject"))
    cited, repos = _cited(Evidence.objects.filter(claim_id__in=live.values("pk")))
    match = ranking.PathMatcher(patterns)
    weights = {pk: weight for pk, subject in subjects.items()
               if (weight := match(subject, cited.get(pk, [])))}
    if not weights:  # the usual answer: no rows or contradictions left to read
        return []
    scored = [(ranking.path_score(weights[claim.pk], search.factors(claim, now)), claim)
              for claim in live.filter(pk__in=list(weights))]
    scored.sort(key=lambda pair: (-pair[0], pair[1].public_id))
    conflicts = contradictions.open_by_claim(fleet)
    return [_briefing_row(c, repos.get(c.pk, []), conflicts.get(c.pk, []))
            for _, c in scored[:k]]


def _live(fleet: Fleet, now: datetime) -> Any:
    """Promoted, not superseded, not expired: what agents may be shown."""
    return Claim.objects.for_fleet(fleet).live(now).defer("embedding", "search_vector")


def _briefing_row(c: Claim, repos: list[str], conflicts: list[str]) -> dict[str, Any]:
    return {
        "id": c.public_id,
        "repos": repos,
        "date": iso(c.promoted_at)[:10],  # type: ignore[index]
        "text": c.for_agents("text"),
        "independent_sessions": c.independent_sessions,
        "confidence": c.confidence,
        "contested": c.contested,
        "stale": c.staleness > 0,
        "stale_since": c.stale_since if c.staleness > 0 else "",
        "why": tallies.why(c, brief=True),
        "conflicts": conflicts,
    }
