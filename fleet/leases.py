"""Advisory leases: hold paths for a while, and learn who else is holding overlapping ones.

Nothing here ever refuses a lease because someone else holds an overlapping one. The
answer to "can I edit this?" is "here is who else is there", and the roster shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from fleet import activity
from fleet.globs import (
    BadPath,
    PrefixIndex,
    in_start_ranges,
    literal_prefix,
    normalise,
    overlaps,
    prefixes_of,
    start_ranges,
)
from fleet.models import Agent, Lease, Session
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import screen

MAX_PATHS_PER_CLAIM = ev.PATHS_MAX  # the contract's limits, as at every door
MAX_TTL = timedelta(seconds=ev.TTL_MAX_SECS)
REFUSED = "lease.refused"  # the activity verb of a claim the per-agent cap refused


@dataclass(frozen=True)
class Contention:
    mine: Lease
    theirs: Lease


@dataclass(frozen=True)
class ClaimResult:
    held: list[Lease]
    contention: list[Contention]


class LeaseCapReached(Exception):
    """A claim that would take an agent past its cap on live leases; nothing was taken.

    Not a ValueError: the request was well formed, and the agent can act on it (release
    some, or claim a directory or glob instead of many files). The REST view answers 409
    and the drain records it as the event's result instead of dead-lettering the line.
    """

    def __init__(self, agent_id: str, live: int, adding: int, cap: int) -> None:
        self.agent_id, self.live, self.adding, self.cap = agent_id, live, adding, cap
        super().__init__(
            f"lease claim refused: agent {agent_id} holds {live} live lease(s) and would take "
            f"{adding} more, past the cap of {cap} per agent "
            "(CTXLAKE_MAX_LIVE_LEASES_PER_AGENT). Release leases it no longer needs, or "
            "claim a directory or glob instead of many files."
        )


def live_lease_cap() -> int:
    """How many live leases one agent may hold (settings.CTXLAKE_MAX_LIVE_LEASES_PER_AGENT)."""
    return int(settings.CTXLAKE_MAX_LIVE_LEASES_PER_AGENT)


@dataclass(frozen=True)
class ReleaseResult:
    released: list[Lease]
    not_held: list[str] = field(default_factory=list)


def contention_among(leases: Sequence[Lease]) -> list[Contention]:
    """Every pair of leases of different agents whose paths overlap (each pair once, the
    earlier lease of `leases` as `mine`, in the order of `leases`).

    Indexed, not all pairs: the leases are filed by literal prefix and agent
    (globs.PrefixIndex), and each is compared only with other agents' leases whose prefix
    allows an overlap. 10k leases of one agent cost 10k index look-ups; comparing every
    pair took 29 s. For leases already in memory; the roster (render and REST) asks the
    database instead (`contended_pairs`), which the tests hold to the same answer.
    """
    index: PrefixIndex[tuple[int, list[int]]] = PrefixIndex()
    groups: dict[tuple[str, int], list[int]] = {}  # (prefix, agent) → positions in `leases`
    for i, lease in enumerate(leases):
        key = (lease.prefix, lease.agent_id)
        if key not in groups:
            groups[key] = []
            index.add(lease.prefix, (lease.agent_id, groups[key]))
        groups[key].append(i)
    pairs: list[Contention] = []
    for i, mine in enumerate(leases):
        later = sorted(
            j
            for agent, members in index.near(mine.prefix)
            if agent != mine.agent_id
            for j in members
            if j > i
        )
        pairs.extend(
            Contention(mine, leases[j]) for j in later if overlaps(mine.path, leases[j].path)
        )
    return pairs


def overlapping(fleet_id: int, leases: Sequence[Lease], *, now: datetime) -> list[Contention]:
    """For each of `leases`, the live leases of other agents that overlap it (`theirs`).

    Reads only the live leases whose literal prefix allows an overlap (the indexed query
    the claim path uses), so a page of five leases costs five index range scans, however
    many leases the fleet holds.
    """
    if not leases:
        return []
    visible = _Visible(_holders_under(fleet_id, {lease.prefix for lease in leases}, now))
    return [
        Contention(mine, theirs)
        for mine in leases
        for theirs in visible.near(mine)
        if theirs.agent_id != mine.agent_id and overlaps(mine.path, theirs.path)
    ]


_CANDIDATE_PAIRS = """
    SELECT a.id, a.path, b.id, b.path
    FROM fleet_lease a
    CROSS JOIN LATERAL (
        SELECT b.id, b.path FROM fleet_lease b
        WHERE b.fleet_id = a.fleet_id AND b.released_at IS NULL AND b.expires_at > %s
          AND b.agent_id <> a.agent_id
          AND b.prefix ~>=~ a.prefix AND b.prefix ~<~ (a.prefix || chr(1114111))
        ORDER BY b.prefix
    ) b
    WHERE a.fleet_id = %s AND a.released_at IS NULL AND a.expires_at > %s
"""


def contended_pairs(fleet_id: int, *, now: datetime) -> list[tuple[int, int]]:
    """(id, id), smaller first, of every pair of the fleet's live leases of different
    agents whose paths overlap: what `contention_among` finds over the live leases.

    The database finds the candidates: for each live lease, the other agents' live
    leases whose literal prefix starts with its own — one range scan of the
    text_pattern_ops index on live prefixes per lease (`~<~ prefix || U+10FFFF` bounds
    the range; every other character sorts below it bytewise), about 17 ms for 10k
    leases; `overlaps` has the last word on each candidate.

    The range is a LATERAL subquery ordered by prefix, which only that index returns in
    order: as a plain join, statistics taken while the fleet held few live leases (a new
    fleet, a quiet night) made the planner loop over every live lease for each one —
    18.6 s for 10k live leases, 185 ms for 1,000, against 17 ms and 1.7 ms this way
    (2026-12-04; a render and the incident scan ask this each time). The ORDER BY also
    keeps the subquery from being flattened back into that join.
    """
    with connection.cursor() as cur:
        cur.execute(_CANDIDATE_PAIRS, [now, fleet_id, now])
        rows = cur.fetchall()
    return sorted(
        {(min(a, b), max(a, b)) for a, a_path, b, b_path in rows if overlaps(a_path, b_path)}
    )


@dataclass(frozen=True)
class ClaimRequest:
    """One agent's claim on some paths, as `claim_paths` takes it."""

    agent: Agent
    paths: Sequence[str]
    ttl: timedelta | None = None
    reason: str = ""
    session: Session | None = None
    now: datetime | None = None


@dataclass(frozen=True)
class ReleaseRequest:
    """One agent's release of the named paths, or of every live lease when `paths` is None."""

    agent: Agent
    paths: Sequence[str] | None = None


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

    BadPath or ValueError (before any write) for anything that is not a repo-relative path
    or more than MAX_PATHS_PER_CLAIM paths; LeaseCapReached (nothing taken) when the new
    paths would take the agent past its cap on live leases. See `claim_many`.
    """
    request = ClaimRequest(agent, list(paths), ttl, reason, session, now)
    (result,) = claim_many(agent.fleet_id, [request])
    if isinstance(result, ValueError | LeaseCapReached):
        raise result
    return result


ClaimOutcome = ClaimResult | ValueError | LeaseCapReached


def claim_many(fleet_id: int, requests: Sequence[ClaimRequest]) -> list[ClaimOutcome]:
    """Apply `requests` in order, as many calls of `claim_paths` would, in two statements.

    1. Normalise and de-duplicate each request's paths before any write; a request that
       cannot be applied gets its error (BadPath is a ValueError) in its place.
    2. Admit the requests in order against the per-agent cap on live leases (`_admit`):
       a request whose new paths would pass it gets LeaseCapReached and takes nothing;
       renewing paths the agent already holds is never refused.
    3. Read the other holders that could overlap any requested path, as they were before
       this call (indexed by literal prefix).
    4. Upsert every admitted (agent, path) in one statement: the partial unique constraint
       on unreleased rows makes a replay renew the lease instead of adding a second one.
    5. Walk the requests in order: each one's contention is the pre-existing leases of
       other agents still active at its time, plus what earlier requests here took.

    The caller guarantees no two requests of one agent name the same path (one statement
    cannot upsert a row twice); the drain's planner (ctxlake_site.drain_plan) does.
    """
    prepared = [_prepare(request) for request in requests]
    valid = [p for p in prepared if not isinstance(p, ValueError)]
    if not valid:
        return list(cast("list[ValueError]", prepared))  # every request failed
    with transaction.atomic(savepoint=False):
        refused = _admit(fleet_id, valid, live_lease_cap())
        admitted = [p for k, p in enumerate(valid) if k not in refused]
        prefixes = {literal_prefix(path) for _, wanted, _, _ in admitted for path in wanted}
        active_at = min(now for _, _, now, _ in valid)
        visible = _Visible(_holders_under(fleet_id, prefixes, active_at) if admitted else [])
        rows = _upsert_many(fleet_id, admitted) if admitted else {}
        admitted_at = iter(range(len(valid)))
        return [
            item if isinstance(item, ValueError)
            else _outcome(item, refused.get(next(admitted_at)), rows, visible)
            for item in prepared
        ]


Prepared = tuple[ClaimRequest, list[str], datetime, datetime]  # request, paths, now, expiry
Upserted = tuple[int, datetime, int | None, datetime]  # lease id, acquired, session, expiry


def _prepare(request: ClaimRequest) -> Prepared | ValueError:
    """The request with its normalised paths, its time and its expiry (the TTL asked, else
    the fleet's, capped at MAX_TTL); the error in its place when a path is bad."""
    try:
        wanted = _wanted(request.paths)
    except ValueError as exc:
        return exc
    now = request.now or timezone.now()
    ttl = min(
        request.ttl or timedelta(seconds=request.agent.fleet.default_lease_ttl_secs), MAX_TTL
    )
    return request, wanted, now, now + ttl


def _outcome(
    item: Prepared, refused: LeaseCapReached | None,
    rows: dict[tuple[int, str], Upserted], visible: _Visible,
) -> ClaimResult | LeaseCapReached:
    """One request's answer, in order (step 5 of claim_many), with its activity row."""
    request, wanted, now, _ = item
    if refused is not None:
        activity.record(request.agent.fleet, REFUSED, agent=request.agent, paths=wanted,
                        live=refused.live, cap=refused.cap)
        return refused
    held = [_held(request, path, rows[request.agent.pk, path]) for path in wanted]
    contention = [
        Contention(mine, theirs)
        for mine in held
        for theirs in visible.near(mine)
        if theirs.agent_id != mine.agent_id
        and theirs.expires_at > now
        and overlaps(mine.path, theirs.path)
    ]
    visible.update(held)
    activity.record(request.agent.fleet, "lease.claimed", agent=request.agent, paths=wanted,
                    contended=len(contention))
    return ClaimResult(held=held, contention=contention)


_LIVE_COUNTS = """
    SELECT agent_id, count(*) FROM fleet_lease
    WHERE fleet_id = %s AND agent_id = ANY(%s) AND released_at IS NULL AND expires_at > %s
    GROUP BY agent_id
"""
_LIVE_OF = """
    SELECT agent_id, path, expires_at FROM fleet_lease
    WHERE fleet_id = %s AND agent_id = ANY(%s) AND released_at IS NULL AND expires_at > %s
"""


def _admit(
    fleet_id: int, valid: list[Prepared], cap: int
) -> dict[int, LeaseCapReached]:
    """Which of `valid` (by position) the per-agent cap refuses, deciding in order as
    one-by-one claims would: a request is refused when it adds paths the agent does not
    hold live at its time and that would leave the agent holding more than `cap`.

    One count per agent first (live at the earliest request's time, so never an
    under-count); only an agent that could pass the cap in this call has its live
    leases read and walked exactly. A guard against runaway agents, not an exact quota:
    two claims of one agent committing at the same instant can both pass it.
    """
    adding: dict[int, int] = {}
    for request, wanted, _, _ in valid:
        adding[request.agent.pk] = adding.get(request.agent.pk, 0) + len(wanted)
    active_at = min(now for _, _, now, _ in valid)
    with connection.cursor() as cur:
        cur.execute(_LIVE_COUNTS, [fleet_id, list(adding), active_at])
        counts = dict(cur.fetchall())
        tight = [a for a, n in adding.items() if counts.get(a, 0) + n > cap]
        if not tight:
            return {}
        cur.execute(_LIVE_OF, [fleet_id, tight, active_at])
        held: dict[int, dict[str, datetime]] = {a: {} for a in tight}
        for agent_pk, path, expires_at in cur.fetchall():
            held[agent_pk][path] = expires_at
    refused: dict[int, LeaseCapReached] = {}
    for k, (request, wanted, now, expires) in enumerate(valid):
        mine = held.get(request.agent.pk)
        if mine is None:
            continue
        new = [path for path in wanted if not (path in mine and mine[path] > now)]
        live = sum(1 for until in mine.values() if until > now)
        if new and live + len(new) > cap:
            refused[k] = LeaseCapReached(request.agent.agent_id, live, len(new), cap)
        else:
            mine.update(dict.fromkeys(wanted, expires))
    return refused


def _wanted(paths: Iterable[str]) -> list[str]:
    wanted = list(dict.fromkeys(normalise(p) for p in paths))
    if not wanted or len(wanted) > MAX_PATHS_PER_CLAIM:
        raise ValueError(f"claim between 1 and {MAX_PATHS_PER_CLAIM} paths")
    return wanted


class _Visible:
    """The live leases a claim can contend with, latest version per (agent, path)."""

    def __init__(self, leases: Iterable[Lease]) -> None:
        self._latest: dict[tuple[int, str], Lease] = {}
        self._index: PrefixIndex[tuple[int, str]] = PrefixIndex()
        self.update(leases)

    def update(self, leases: Iterable[Lease]) -> None:
        for lease in leases:
            key = (lease.agent_id, lease.path)
            if key not in self._latest:
                self._index.add(lease.prefix, key)
            self._latest[key] = lease

    def near(self, mine: Lease) -> list[Lease]:
        """The leases whose literal prefix allows an overlap with `mine`."""
        return [self._latest[key] for key in dict.fromkeys(self._index.near(mine.prefix))]


_LIVE = "l.fleet_id = %(fleet)s AND l.released_at IS NULL AND l.expires_at > %(at)s"
#: The columns `_lease` reads, in its order.
_LEASE_ROW = ("l.id, l.agent_id, l.session_id, l.path, l.prefix, l.reason, l.acquired_at, "
              "l.expires_at")
_HOLDER = f"{_LEASE_ROW}, l.offered_with_id"
# The leases first, then their agents: joined freely, statistics taken while the fleet
# had few agents made Postgres scan the agents and run every range once per agent.
_HOLDERS = f"""
    WITH l AS MATERIALIZED ({{leases}})
    SELECT {_LEASE_ROW}, a.agent_id, l.offered_with_id
    FROM l JOIN fleet_agent a ON a.id = l.agent_id
"""
_EVERY_LIVE = f"SELECT {_HOLDER} FROM fleet_lease l WHERE {_LIVE}"
# A lease whose prefix is a start of a requested one, then the leases in each range, a
# range scan each of the text_pattern_ops index on live prefixes (as a join, a prepared
# statement's generic plan, which guesses ten ranges, tested every live lease against
# every range).
_NEAR = f"""
    {_EVERY_LIVE} AND l.prefix = ANY(%(starts)s)
    UNION ALL
    SELECT l.* FROM {in_start_ranges(_EVERY_LIVE, "l.prefix")} l
"""
_HOLDERS_LIVE = _HOLDERS.format(leases=_EVERY_LIVE)
_HOLDERS_NEAR = _HOLDERS.format(leases=_NEAR)


def _holders_under(fleet_id: int, prefixes: set[str], active_at: datetime) -> list[Lease]:
    """Live leases whose literal prefix starts with, or is a start of, one of `prefixes`.

    Hand-written SQL: it runs for every batch of claims the drain applies, where building
    the equivalent ORM query cost three times as long as running it.
    """
    params: dict[str, Any] = {"fleet": fleet_id, "at": active_at}
    ranges = start_ranges(prefixes)
    if ranges is None:  # "" among them: any live lease may overlap
        sql = _HOLDERS_LIVE
    else:
        sql = _HOLDERS_NEAR
        starts = {start for low in ranges.lows for start in prefixes_of(low)}
        params.update(ranges._asdict(), starts=sorted(starts - set(ranges.lows)))
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return [
        _lease(
            fleet_id,
            row,
            agent=Agent(pk=row[1], fleet_id=fleet_id, agent_id=row[8]),
            offered_with_id=row[9],
        )
        for row in rows
    ]


def _lease(fleet_id: int, row: tuple[Any, ...], **more: Any) -> Lease:
    """A Lease from a row starting (id, agent_id, session_id, path, prefix, reason,
    acquired_at, expires_at), as the hand-written queries here return them."""
    pk, agent_pk, session_pk, path, prefix, reason, acquired, expires = row[:8]
    if "agent" not in more:
        more["agent_id"] = agent_pk
    return Lease(
        pk=pk,
        fleet_id=fleet_id,
        session_id=session_pk,
        path=path,
        prefix=prefix,
        reason=reason,
        acquired_at=acquired,
        expires_at=expires,
        **more,
    )


_UPSERT_MANY = """
    INSERT INTO fleet_lease (fleet_id, agent_id, session_id, path, prefix, reason, acquired_at,
                             expires_at, screen_flags)
    SELECT %s, r.agent_id, r.session_id, r.path, r.prefix, r.reason, r.acquired_at, r.expires_at,
           r.screen_flags
    FROM jsonb_to_recordset(%s::jsonb) AS r(agent_id bigint, session_id bigint, path text,
                                            prefix text, reason text, acquired_at timestamptz,
                                            expires_at timestamptz, screen_flags jsonb)
    ON CONFLICT (fleet_id, agent_id, path) WHERE released_at IS NULL
    DO UPDATE SET reason = EXCLUDED.reason,
                  screen_flags = EXCLUDED.screen_flags,
                  -- a person's release holds for the text released, not for a new reason
                  screen_released_at = CASE WHEN fleet_lease.reason = EXCLUDED.reason
                                            THEN fleet_lease.screen_released_at END,
                  screen_released_by_id = CASE WHEN fleet_lease.reason = EXCLUDED.reason
                                               THEN fleet_lease.screen_released_by_id END,
                  -- a renewal stamped before the lease was acquired (a late spool line
                  -- after a REST claim) keeps the expiry it has rather than break it
                  expires_at = CASE WHEN EXCLUDED.expires_at > fleet_lease.acquired_at
                                    THEN EXCLUDED.expires_at ELSE fleet_lease.expires_at END,
                  session_id = COALESCE(EXCLUDED.session_id, fleet_lease.session_id)
    RETURNING id, agent_id, path, acquired_at, session_id, expires_at
"""


def _upsert_many(
    fleet_id: int, valid: list[Prepared]
) -> dict[tuple[int, str], Upserted]:
    """One statement for every (agent, path); (agent pk, path) → (id, acquired, session,
    expires).

    The rows travel as one JSON document, which costs less to send than parallel arrays.
    Each request's reason is screened once (mcp_bridge.contract.screen), for all its paths.
    """
    flags = {id(request): screen.screen_fields({"reason": request.reason})
             for request, _, _, _ in valid}
    rows = [
        {
            "agent_id": request.agent.pk,
            "session_id": request.session.pk if request.session else None,
            "path": path,
            "prefix": literal_prefix(path),
            "reason": request.reason,
            "screen_flags": flags[id(request)],
            "acquired_at": now.isoformat(),
            "expires_at": expires.isoformat(),
        }
        for request, wanted, now, expires in valid
        for path in wanted
    ]
    with connection.cursor() as cur:
        cur.execute(_UPSERT_MANY, [fleet_id, json.dumps(rows)])
        return {
            (agent_pk, path): (pk, acquired, session_pk, expires)
            for pk, agent_pk, path, acquired, session_pk, expires in cur.fetchall()
        }


def _held(
    request: ClaimRequest, path: str, row: tuple[int, datetime, int | None, datetime]
) -> Lease:
    pk, acquired_at, session_id, expires = row
    return Lease(
        pk=pk,
        fleet=request.agent.fleet,
        agent=request.agent,
        session_id=session_id,
        path=path,
        prefix=literal_prefix(path),
        reason=request.reason,
        acquired_at=acquired_at,
        expires_at=expires,
    )


def release_paths(
    agent: Agent, paths: Iterable[str] | None = None, *, now: datetime | None = None
) -> ReleaseResult:
    """Release the named paths, or every live lease of `agent` when `paths` is None."""
    request = ReleaseRequest(agent, None if paths is None else list(paths))
    (result,) = release_many(agent.fleet_id, [request], now=now)
    if isinstance(result, BadPath):
        raise result
    return result


_RELEASE_MANY = """
    UPDATE fleet_lease SET released_at = %s
    WHERE fleet_id = %s AND released_at IS NULL
      AND (agent_id = ANY(%s)
           OR (agent_id, path) IN (SELECT agent_id, path
                                   FROM jsonb_to_recordset(%s::jsonb) AS r(agent_id bigint,
                                                                           path text)))
    RETURNING id, agent_id, session_id, path, prefix, reason, acquired_at, expires_at
"""


def release_many(
    fleet_id: int, requests: Sequence[ReleaseRequest], *, now: datetime | None = None
) -> list[ReleaseResult | BadPath]:
    """Apply `requests` in order, as many calls of `release_paths` would, in one statement.

    The UPDATE takes the row locks and RETURNING says what it released, so each request
    learns what it released and which of the paths it named it did not hold. The caller
    guarantees that an agent releasing everything makes no other request here (the
    drain's planner does); an agent may name paths in several.
    """
    now = now or timezone.now()
    wanted: list[list[str] | None | BadPath] = []
    for request in requests:
        try:
            wanted.append(
                None
                if request.paths is None
                else list(dict.fromkeys(normalise(p) for p in request.paths))
            )
        except BadPath as exc:
            wanted.append(exc)
    with transaction.atomic(savepoint=False):
        return _release(fleet_id, requests, wanted, now)


def _release(
    fleet_id: int,
    requests: Sequence[ReleaseRequest],
    wanted: list[list[str] | None | BadPath],
    now: datetime,
) -> list[ReleaseResult | BadPath]:
    every = [r.agent.pk for r, w in zip(requests, wanted, strict=True) if w is None]
    named = [
        (r.agent.pk, p)
        for r, w in zip(requests, wanted, strict=True)
        if isinstance(w, list)
        for p in w
    ]
    if not every and not named:
        released_rows: list[tuple[Any, ...]] = []
    else:
        with connection.cursor() as cur:
            cur.execute(
                _RELEASE_MANY,
                [now, fleet_id, every, json.dumps([{"agent_id": a, "path": p} for a, p in named])],
            )
            released_rows = cur.fetchall()
    by_agent: dict[int, list[Lease]] = {}  # what releases of everything took
    by_name: dict[tuple[int, str], Lease] = {}  # what releases of named paths took
    every_set = set(every)
    for row in released_rows:
        lease = _lease(fleet_id, row, released_at=now)
        agent_pk, path = lease.agent_id, lease.path
        if agent_pk in every_set:
            by_agent.setdefault(agent_pk, []).append(lease)
        else:
            by_name[agent_pk, path] = lease
    results: list[ReleaseResult | BadPath] = []
    for request, names in zip(requests, wanted, strict=True):
        if isinstance(names, BadPath):
            results.append(names)
            continue
        agent_pk = request.agent.pk
        if names is None:
            released = by_agent.get(agent_pk, [])
        else:  # the first request naming a path gets it; a later one finds it not held
            released = [by_name.pop((agent_pk, p)) for p in names if (agent_pk, p) in by_name]
        released.sort(key=lambda lease: lease.path)
        for lease in released:
            lease.agent = request.agent
        found = {lease.path for lease in released}
        not_held = [p for p in names if p not in found] if names is not None else []
        activity.record(
            request.agent.fleet,
            "lease.released",
            agent=request.agent,
            paths=sorted(found),
            not_held=not_held,
        )
        results.append(ReleaseResult(released=released, not_held=not_held))
    return results


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
