"""Draining agents' spool files into Postgres, each event exactly once.

How exactly-once holds, including when a drain is killed at any instruction:

1. Lines are read from a durable per-file cursor (keyed by the file's inode, so a file the
   bridge rotated by renaming keeps its position). Only complete lines are read; a torn
   last line is left for the next pass.
2. Events are applied in batches, in one transaction together with the insert of their
   AppliedEvent rows (unique event ids): an event is applied with its record, or not at
   all, and a duplicate id (a replay) is skipped. Inside a batch, runs of events that
   commute are applied a kind at a time (drain_plan). Should the batch hit a database
   error, it is redone with a savepoint per event, so one bad event cannot hold up the rest.
3. The batch's transaction also advances the cursor. A kill before COMMIT loses the whole
   batch *and* its cursor move, so the next pass replays it; a kill after COMMIT has
   recorded both. Either way each event is applied once.
4. A fully read rotated file is retired: its cursor row is deleted in a synchronous commit
   first, then the file is unlinked (a kill in between only causes a harmless re-read).

An unparseable or invalid line is appended (fsynced) to `<spool>/dead/<fleet>.ndjson`
with its reason before the cursor moves past it, and the lines after it go on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from ctxlake_site import drain_plan
from fleet import activity, rendering
from fleet.models import Agent, AppliedEvent, Fleet, Session, SpoolCursor
from fleet.spool_apply import BatchApplier, Envelope, InvalidEvent, Outcome, filled
from mcp_bridge import contract
from mcp_bridge.contract import redact

Applier = Callable[[Envelope], dict[str, Any]]
BATCH_EVENTS = 500
READ_BYTES = 4 << 20
DEAD_LINE_BYTES = 64 << 10  # what a dead-letter record keeps of an oversized line


@dataclass
class DrainReport:
    applied: int = 0
    duplicates: int = 0
    dead: int = 0
    files_retired: int = 0
    waiting: dict[str, int] = field(default_factory=dict)  # fleet → bytes held for unknown fleets
    fleets_changed: set[str] = field(default_factory=set)

    def merge(self, other: DrainReport) -> None:
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.dead += other.dead
        self.fleets_changed |= other.fleets_changed

    def as_dict(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "duplicates": self.duplicates,
            "dead": self.dead,
            "files_retired": self.files_retired,
            "waiting_for_unknown_fleets": self.waiting,
            "fleets_changed": sorted(self.fleets_changed),
        }


def spool_root(spool_dir: Path) -> Path:
    return spool_dir / contract.SPOOL_SUBDIR


def fleet_files(spool_dir: Path) -> dict[str, list[Path]]:
    """Spool files per fleet id, rotated ones first (their names sort in write order)."""
    root = spool_root(spool_dir)
    files: dict[str, list[Path]] = {}
    if not root.is_dir():
        return files
    for path in sorted(root.glob(f"*{contract.SPOOL_SUFFIX}")):
        fleet_id = path.name.split(".", 1)[0]
        if contract.FLEET_ID_RE.fullmatch(fleet_id):
            files.setdefault(fleet_id, []).append(path)
    for fleet_id, paths in files.items():
        active = root / f"{fleet_id}{contract.SPOOL_SUFFIX}"
        files[fleet_id] = [p for p in paths if p != active] + ([active] if active in paths else [])
    return files


class Drainer:
    """One pass over the spool; `appliers` maps an event kind to the app function owning it,
    `batch_appliers` (optional, per kind) to the function applying a run of such events."""

    def __init__(
        self,
        spool_dir: Path,
        appliers: dict[str, Applier],
        *,
        batch_appliers: dict[str, BatchApplier] | None = None,
        progress: Callable[[DrainReport], None] | None = None,
    ) -> None:
        self.spool_dir = spool_dir
        self.appliers = appliers
        self.batch_appliers = batch_appliers or {}
        self.progress = progress
        self.report = DrainReport()

    def run(self, only_fleet: str | None = None) -> DrainReport:
        for fleet_id, paths in fleet_files(self.spool_dir).items():
            if only_fleet and fleet_id != only_fleet:
                continue
            fleet = Fleet.objects.filter(slug=fleet_id).first()
            if fleet is None:  # keep the lines until an operator creates the fleet
                self.report.waiting[fleet_id] = sum(p.stat().st_size for p in paths)
                continue
            for path in paths:
                self._drain_file(fleet, path, retire=path.name != f"{fleet_id}.ndjson")
        for slug in self.report.fleets_changed:
            rendering.request_render(Fleet.objects.get(slug=slug))
        return self.report

    def _drain_file(self, fleet: Fleet, path: Path, *, retire: bool) -> None:
        while True:
            try:
                stat = path.stat()
            except FileNotFoundError:
                return
            cursor = self._cursor(path, stat)
            if cursor.offset > stat.st_size:  # replaced or truncated under us: start over
                cursor.offset = 0
            lines = list(_complete_lines(path, cursor.offset))
            if not lines:
                break
            self._apply_batch(fleet, path, cursor, lines[:BATCH_EVENTS])
            if self.progress:
                self.progress(self.report)
        if retire and cursor.offset >= stat.st_size:
            self._retire(path, cursor)

    def _cursor(self, path: Path, stat: os.stat_result) -> SpoolCursor:
        cursor, _ = SpoolCursor.objects.get_or_create(
            device=stat.st_dev, inode=stat.st_ino, defaults={"path": str(path)}
        )
        return cursor

    def _apply_batch(
        self, fleet: Fleet, path: Path, cursor: SpoolCursor, lines: list[tuple[int, int, bytes]]
    ) -> None:
        """Apply one batch: the fast path in one transaction, or event by event on trouble."""
        parsed = [(start, raw, _parse(raw, fleet.slug)) for start, _, raw in lines]
        end_offset = lines[-1][1]
        try:
            with transaction.atomic(), activity.deferred():
                counts = self._apply_fast(fleet, path, parsed)
                self._advance(cursor, path, end_offset)
        except DatabaseError:
            with transaction.atomic():
                counts = self._apply_slow(fleet, path, parsed)
                self._advance(cursor, path, end_offset)
        self.report.merge(counts)

    def _apply_fast(
        self, fleet: Fleet, path: Path, parsed: list[tuple[int, bytes, dict[str, Any] | str]]
    ) -> DrainReport:
        """Record every event id in one statement, then apply only the ids that were new.

        The new events are cut into segments of pairwise commuting events (drain_plan);
        inside one, each kind with a batch applier is applied in one call, the others one
        by one. Appliers validate before they write, so an InvalidEvent leaves nothing
        behind and needs no savepoint; its id stays recorded as dead-lettered. Any
        database error aborts the batch, and _apply_slow redoes it event by event.
        """
        counts = DrainReport()
        events = [e for _, _, e in parsed if isinstance(e, dict)]
        new_ids = _record_ids(fleet, events)
        resolver = _Resolver(fleet)
        fresh: dict[int, Envelope] = {}  # position in `parsed` → the event, to apply
        for position, (_, _, event) in enumerate(parsed):
            if isinstance(event, str):
                continue
            if event["id"] not in new_ids:
                counts.duplicates += 1
            else:
                new_ids.discard(event["id"])  # the same id twice in one batch applies once
                fresh[position] = resolver.envelope(event)
        outcomes = dict(zip(fresh, self._outcomes(list(fresh.values())), strict=True))
        results: dict[str, dict[str, Any]] = {}
        for position, (start, raw, event) in enumerate(parsed):  # dead letters in spool order
            if isinstance(event, str):
                self._dead(fleet, path, start, raw, event, counts)
            elif position in outcomes:
                outcome = outcomes[position]
                if isinstance(outcome, InvalidEvent):
                    self._dead(fleet, path, start, raw, str(outcome), counts)
                    results[event["id"]] = {"dead_lettered": str(outcome)}
                else:
                    results[event["id"]] = outcome
                    counts.applied += 1
        _store_results(results)
        resolver.flush()
        if counts.applied:
            counts.fleets_changed.add(fleet.slug)
        return counts

    def _outcomes(self, envelopes: list[Envelope]) -> list[Outcome]:
        """Each event's result or InvalidEvent, applied segment by segment, kind by kind."""
        outcomes: list[Outcome | None] = [None] * len(envelopes)
        for segment in drain_plan.segments(envelopes):
            by_kind: dict[str, list[int]] = {}
            for i in segment:
                by_kind.setdefault(envelopes[i].kind, []).append(i)
            for kind, indices in drain_plan.in_apply_order(by_kind):
                batch = self.batch_appliers.get(kind)
                if batch is not None:
                    applied = batch([envelopes[i] for i in indices])
                else:
                    applied = [self._apply_one(envelopes[i]) for i in indices]
                for i, outcome in zip(indices, applied, strict=True):
                    outcomes[i] = outcome
        return filled(outcomes)

    def _apply_one(self, envelope: Envelope) -> Outcome:
        try:
            return self.appliers[envelope.kind](envelope)
        except InvalidEvent as exc:
            return exc

    def _apply_slow(
        self, fleet: Fleet, path: Path, parsed: list[tuple[int, bytes, dict[str, Any] | str]]
    ) -> DrainReport:
        counts = DrainReport()
        resolver = _Resolver(fleet)
        for start, raw, event in parsed:
            if isinstance(event, str):
                self._dead(fleet, path, start, raw, event, counts)
                continue
            try:
                with transaction.atomic():
                    result = self.appliers[event["kind"]](resolver.envelope(event))
                    AppliedEvent.objects.create(
                        event_id=event["id"], fleet=fleet, kind=event["kind"], result=result
                    )
            except InvalidEvent as exc:
                self._dead(fleet, path, start, raw, str(exc), counts)
            except IntegrityError:  # already applied (a replay, or a concurrent drain)
                counts.duplicates += 1
            else:
                counts.applied += 1
                counts.fleets_changed.add(fleet.slug)
        resolver.flush()
        return counts

    @staticmethod
    def _advance(cursor: SpoolCursor, path: Path, offset: int) -> None:
        cursor.offset = offset
        cursor.path = str(path)
        cursor.updated_at = timezone.now()
        cursor.save(update_fields=["offset", "path", "updated_at"])

    def _dead(
        self, fleet: Fleet, path: Path, start: int, raw: bytes, reason: str, counts: DrainReport
    ) -> None:
        dead_dir = self.spool_dir / "dead"
        dead_dir.mkdir(parents=True, exist_ok=True)
        record = {
            "at": timezone.now().isoformat(),
            "file": path.name,
            "offset": start,
            "reason": reason,
            "line": raw[:DEAD_LINE_BYTES].decode("utf-8", "backslashreplace"),
        }
        fd = os.open(
            dead_dir / f"{fleet.slug}.ndjson", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
        )
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        counts.dead += 1

    def _retire(self, path: Path, cursor: SpoolCursor) -> None:
        with transaction.atomic():
            with connection.cursor() as cur:  # this one commit must be durable before unlink
                cur.execute("SET LOCAL synchronous_commit = on")
            cursor.delete()
        path.unlink(missing_ok=True)
        self.report.files_retired += 1


class _Resolver:
    """Agents and sessions named by events, created or updated once per batch."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.agents: dict[str, Agent] = {}
        self.sessions: dict[str, Session] = {}
        self.last_seen: dict[str, datetime] = {}

    def envelope(self, event: dict[str, Any]) -> Envelope:
        at = min(contract.parse_time(event["at"]) or timezone.now(), timezone.now())
        agent = self._agent(event["agent"])
        self.last_seen[agent.agent_id] = max(at, self.last_seen.get(agent.agent_id, at))
        session = self._session(event["session"], agent, at) if event.get("session") else None
        return Envelope(
            event_id=event["id"],
            kind=event["kind"],
            fleet=self.fleet,
            agent=agent,
            session=session,
            at=at,
            payload=event["payload"],
        )

    def _agent(self, agent_id: str) -> Agent:
        if agent_id not in self.agents:
            agent = Agent.objects.get_or_create(fleet=self.fleet, agent_id=agent_id)[0]
            agent.fleet = self.fleet  # appliers read it; a fetched row would query for it
            self.agents[agent_id] = agent
        return self.agents[agent_id]

    def _session(self, session_id: str, agent: Agent, at: datetime) -> Session:
        if session_id not in self.sessions:
            self.sessions[session_id] = Session.objects.get_or_create(
                fleet=self.fleet,
                session_id=session_id,
                defaults={"agent": agent, "started_at": at},
            )[0]
        return self.sessions[session_id]

    def flush(self) -> None:
        """Move each agent's last_seen_at forward (never back), in one statement."""
        if not self.last_seen:
            return
        seen = [{"id": self.agents[a].pk, "at": at.isoformat()} for a, at in self.last_seen.items()]
        with connection.cursor() as cur:
            cur.execute(
                """
                UPDATE fleet_agent AS a SET last_seen_at = s.at
                FROM jsonb_to_recordset(%s::jsonb) AS s(id bigint, at timestamptz)
                WHERE a.id = s.id AND (a.last_seen_at IS NULL OR a.last_seen_at < s.at)
                """,
                [json.dumps(seen)],
            )


def _record_ids(fleet: Fleet, events: list[dict[str, Any]]) -> set[str]:
    """Insert AppliedEvent rows for `events`; the ids that were not already there."""
    if not events:
        return set()
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO fleet_appliedevent (event_id, fleet_id, kind, source, applied_at, result)
            SELECT id, %s, kind, 'spool', now(), '{}'::jsonb
            FROM jsonb_to_recordset(%s::jsonb) AS e(id uuid, kind text)
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id
            """,
            [fleet.pk, json.dumps([{"id": e["id"], "kind": e["kind"]} for e in events])],
        )
        return {str(row[0]) for row in cur.fetchall()}


def _store_results(results: dict[str, dict[str, Any]]) -> None:
    if not results:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE fleet_appliedevent AS a SET result = r.value
            FROM jsonb_each(%s::jsonb) AS r(key, value)
            WHERE a.event_id = r.key::uuid
            """,
            [json.dumps(results)],
        )


def _complete_lines(path: Path, offset: int) -> Iterator[tuple[int, int, bytes]]:
    """(start, end, line without its newline) for each complete line after `offset`."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(READ_BYTES)
    last = data.rfind(b"\n")
    if last < 0:
        if len(data) >= READ_BYTES:  # no newline in 4 MiB: dead-letter it rather than stall
            yield offset, offset + len(data), data
        return
    pos = offset
    for raw in data[: last + 1].split(b"\n")[:-1]:
        start, pos = pos, pos + len(raw) + 1
        if raw.strip():
            yield start, pos, raw


def _parse(raw: bytes, fleet_slug: str) -> dict[str, Any] | str:
    """The event, scrubbed, or the reason it cannot be applied."""
    try:
        event = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(event, dict):
        return "not a JSON object"
    problem = contract.envelope_problem(event, fleet_slug, fleet_source="the spool file's fleet")
    if problem:
        return problem
    event["payload"] = redact.scrub_value(event["payload"])  # again, at ingest
    return event
