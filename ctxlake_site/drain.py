"""Draining agents' spool files into Postgres, each event exactly once.

How exactly-once holds, including when a drain is killed at any instruction:

1. Lines are read from a durable per-file cursor (keyed by the file's inode, so a file the
   bridge rotated by renaming keeps its position). Only complete lines are read; a torn
   last line is left for the next pass.
2. Events are applied in batches, in one transaction together with the insert of their
   AppliedEvent rows (unique event ids): an event is applied with its record, or not at
   all, and a duplicate id (a replay) is skipped — also one that another drain records
   while this batch applies (the unique id refuses the batch's record, and the redo
   below skips it). Inside a batch, runs of events that
   commute are applied a kind at a time (drain_plan). Should the batch hit a database
   error — or any other exception — it is redone with a savepoint per event, so one bad
   event cannot hold up the rest: whatever that event raises (a DataError, a RecursionError,
   a ValueError…) dead-letters it with the exception as the reason. Only a lost database
   connection stops the pass (DrainStopped); the next pass resumes from the cursors.
3. The batch's transaction also advances the cursor. A kill before COMMIT loses the whole
   batch *and* its cursor move, so the next pass replays it; a kill after COMMIT has
   recorded both. Either way each event is applied once.
4. A fully read rotated file is retired: its cursor row is deleted in a synchronous commit
   first, then the file is unlinked (a kill in between only causes a harmless re-read).

An unparseable or invalid line becomes a DeadLetter row with its reason, in the same
transaction that moves the cursor past it (so exactly once, keyed by cursor and offset),
and is then appended to `<spool>/dead/<fleet>.ndjson`; the lines after it go on. Each
fleet's files are drained in isolation: an error in one fleet never delays another.
Spool files of a fleet that does not exist are moved to `<spool>/quarantine/` (kept,
logged once, shown by `doctor`) until `drain_spool --requeue FLEET` puts them back.

Lines received over REST wait in the inbox table (fleet.inbox) instead of a file, and are
applied by the same code with the same contract, in the same way:

5. A batch is the fleet's oldest inbox rows, claimed FOR UPDATE SKIP LOCKED inside one
   transaction that applies them (as in 2), records their dead letters (keyed by INBOX_KEY
   and the row's id, which is never reused) and deletes them. A kill before COMMIT
   releases the rows with the connection; the next pass, on any worker host, claims them
   again. A transaction-scoped advisory lock per fleet lets one drain at a time take a
   fleet's inbox, so its events are applied in the order they were received, as a file's
   are; a second worker host skips that fleet for this pass.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, cast

from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from ctxlake_site import drain_plan
from fleet import activity, applied, inbox, rendering, sessions
from fleet.models import Agent, AppliedEvent, DeadLetter, Fleet, Session, SpoolCursor
from fleet.spool_apply import BatchApplier, Envelope, InvalidEvent, Outcome, filled
from mcp_bridge import contract
from mcp_bridge.contract import events, redact
from mcp_bridge.contract.spool import Spool

log = logging.getLogger(__name__)

Applier = Callable[[Envelope], dict[str, Any]]
#: A batch — one transaction — is at most this many lines and this many bytes of them
#: (it is held in memory whole). Each batch pays a fixed part: ~25 statements, their round
#: trips and the COMMIT. 500 → 1,000 lines drained bench/pipeline_bench.py's 10k mixed
#: events in 1.96 s instead of 2.16 s of wall and 1.34 s instead of 1.45 s of CPU here
#: (2026-12-06, medians of four); 2,000 gained nothing this machine's spread could show.
BATCH_EVENTS = 1000
BATCH_BYTES = 8 << 20
#: A line longer than this is dead-lettered in pieces of this size instead of being read
#: whole (the bridge and the REST upload never write one over 256 KiB).
LINE_LIMIT_BYTES = 1 << 20
DEAD_LINE_CHARS = 64 << 10  # what a dead-letter record keeps of an oversized line
QUARANTINE = "quarantine"
DEAD = "dead"
#: DeadLetter.cursor_key of a dead inbox row (SpoolCursor ids start at 1); its offset is the
#: InboxEvent id, so a letter is recorded once however often its batch is retried.
INBOX_KEY = 0
INBOX_FILE = "inbox"


class DrainStopped(Exception):
    """The database connection was lost mid-pass; nothing half-done, the next pass resumes."""


@dataclass
class DrainReport:
    applied: int = 0
    duplicates: int = 0
    dead: int = 0
    files_retired: int = 0
    quarantined: list[str] = field(default_factory=list)  # files moved aside this pass
    failed_fleets: dict[str, str] = field(default_factory=dict)  # fleet → why it stopped
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
            "quarantined": self.quarantined,
            "failed_fleets": self.failed_fleets,
            "fleets_changed": sorted(self.fleets_changed),
        }


@dataclass
class Line:
    """One complete spool line: where it starts and ends in its file, and its bytes."""

    start: int
    end: int
    raw: bytes
    event: dict[str, Any] | str | None = None  # the parsed event, or why it is dead


@dataclass(frozen=True)
class Where:
    """Where a batch's lines were read: the name and key its dead letters record, and the
    source its AppliedEvent rows name ("spool" for a file, "api" for the inbox)."""

    file: str
    key: int
    source: str


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


def requeue_quarantined(spool_dir: Path, fleet_slug: str) -> int:
    """Put a fleet's quarantined files back in the spool as rotated files; how many moved."""
    moved = 0
    for path in sorted((spool_dir / QUARANTINE).glob(f"{fleet_slug}.*{contract.SPOOL_SUFFIX}")):
        path.rename(spool_root(spool_dir) / path.name)
        moved += 1
    return moved


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
        """Drain every fleet's files, then every fleet's inbox rows, each fleet on its own:
        one fleet's trouble is logged and reported, and the others go on. A lost connection
        stops the pass (DrainStopped)."""
        for fleet_id, paths in fleet_files(self.spool_dir).items():
            if not only_fleet or fleet_id == only_fleet:
                self._isolated(fleet_id, partial(self._drain_fleet, fleet_id, paths))
        for waiting in Fleet.objects.filter(pk__in=inbox.fleets_waiting()).order_by("slug"):
            if not only_fleet or waiting.slug == only_fleet:
                self._isolated(waiting.slug, partial(self._drain_inbox, waiting))
        for slug in self.report.fleets_changed:
            fleet = Fleet.objects.filter(slug=slug).first()
            if fleet is not None:
                rendering.request_render(fleet)
        return self.report

    def _isolated(self, fleet_id: str, drain: Callable[[], None]) -> None:
        """Run one fleet's drain; its trouble is logged and reported, a lost connection
        stops the pass."""
        try:
            drain()
        except DrainStopped:
            raise
        except Exception as exc:  # noqa: BLE001 - isolate fleets; the reason is reported
            if _connection_lost(exc):
                raise DrainStopped(str(exc)) from exc
            reason = redact.scrub_text(f"{type(exc).__name__}: {exc}")
            self.report.failed_fleets[fleet_id] = reason
            log.exception("drain of fleet %s stopped: %s", fleet_id, reason)

    def _drain_inbox(self, fleet: Fleet) -> None:
        """Apply the fleet's inbox rows, oldest first, a batch per transaction (5. above)."""
        where = Where(INBOX_FILE, INBOX_KEY, "api")
        while True:
            with transaction.atomic():
                if not inbox.lock_fleet(fleet):
                    return  # another drain is on this fleet's inbox; it keeps the order
                rows = inbox.claim(fleet, BATCH_EVENTS, BATCH_BYTES)
                if not rows:
                    return
                batch = [Line(row.pk, row.pk, bytes(row.line)) for row in rows]
                dead = self._apply(fleet, where, batch, partial(inbox.delete, rows))
            self._write_dead_file(fleet, dead)  # after commit: only letters recorded now
            if self.progress:
                self.progress(self.report)

    def _drain_fleet(self, fleet_id: str, paths: list[Path]) -> None:
        fleet = Fleet.objects.filter(slug=fleet_id).first()
        if fleet is None:
            self._quarantine(fleet_id)
            return
        for path in paths:
            self._drain_file(fleet, path, retire=path.name != f"{fleet_id}{contract.SPOOL_SUFFIX}")

    def _quarantine(self, fleet_id: str) -> None:
        """Move an unknown fleet's files aside, under the fleet's spool lock (never deleted)."""
        target_dir = self.spool_dir / QUARANTINE
        target_dir.mkdir(parents=True, exist_ok=True)
        with Spool(self.spool_dir, fleet=fleet_id, agent="drain").locked():
            for path in fleet_files(self.spool_dir).get(fleet_id, []):
                stamp = timezone.now().strftime("%Y%m%dT%H%M%S.%fZ")
                target = target_dir / f"{fleet_id}.{stamp}{contract.SPOOL_SUFFIX}"
                path.rename(target)
                self.report.quarantined.append(target.name)
                log.warning(
                    "spool file %s names fleet %r, which does not exist: moved to %s "
                    "(create the fleet with `manage.py create_fleet %s`, then "
                    "`manage.py drain_spool --requeue %s`)",
                    path.name, fleet_id, target, fleet_id, fleet_id,
                )

    def _drain_file(self, fleet: Fleet, path: Path, *, retire: bool) -> None:
        try:
            f = open(path, "rb")  # noqa: SIM115 - held across batches, closed below
        except FileNotFoundError:
            return
        with f:
            stat = os.fstat(f.fileno())
            cursor = self._cursor(path, stat)
            if cursor.offset > stat.st_size:  # replaced or truncated under us: start over
                cursor.offset = 0
            f.seek(cursor.offset)
            while True:
                batch = list(_read_lines(f, BATCH_EVENTS, BATCH_BYTES))
                if not batch:
                    break
                self._apply_batch(fleet, path, cursor, batch)
                if self.progress:
                    self.progress(self.report)
            size = os.fstat(f.fileno()).st_size
        if retire and cursor.offset >= size:
            self._retire(path, cursor)

    def _cursor(self, path: Path, stat: os.stat_result) -> SpoolCursor:
        cursor, _ = SpoolCursor.objects.get_or_create(
            device=stat.st_dev, inode=stat.st_ino, defaults={"path": str(path)}
        )
        return cursor

    def _apply_batch(
        self, fleet: Fleet, path: Path, cursor: SpoolCursor, batch: list[Line]
    ) -> None:
        """Apply one batch of a file and move its cursor past it, in one transaction."""
        end_offset = batch[-1].end
        dead = self._apply(fleet, Where(path.name[:255], cursor.pk, "spool"), batch,
                           lambda: self._advance(cursor, path, end_offset))
        self._write_dead_file(fleet, dead)  # after commit: only letters recorded now

    def _apply(
        self, fleet: Fleet, where: Where, batch: list[Line], done: Callable[[], object]
    ) -> list[DeadLetter]:
        """Apply one batch: the fast path in one transaction, or event by event on trouble;
        `done` (move the cursor, delete the inbox rows) commits with whichever succeeds.
        Inside a caller's transaction (the inbox's) these are savepoints. Returns the dead
        letters recorded, for the caller to copy to the dead file once committed."""
        for line in batch:
            if line.event is None:
                line.event = _parse(line.raw, fleet.slug)
        dead: list[DeadLetter] = []
        try:
            with transaction.atomic(), activity.deferred():
                counts, dead = self._apply_fast(fleet, where, batch)
                done()
        except Exception as exc:  # noqa: BLE001 - any failure: redo event by event
            if _connection_lost(exc):
                raise DrainStopped(str(exc)) from exc
            with transaction.atomic():
                counts, dead = self._apply_slow(fleet, where, batch)
                done()
        self.report.merge(counts)
        return dead

    def _apply_fast(
        self, fleet: Fleet, where: Where, batch: list[Line]
    ) -> tuple[DrainReport, list[DeadLetter]]:
        """Apply the events whose ids are not recorded yet, then record them with their
        answers, each in one statement (fleet.applied).

        The new events are cut into segments of pairwise commuting events (drain_plan);
        inside one, each kind with a batch applier is applied in one call, the others one
        by one. Appliers validate before they write, so an InvalidEvent leaves nothing
        behind and needs no savepoint; its id is recorded as dead-lettered. Any other
        exception — the record's IntegrityError, should another drain have recorded one
        of the ids meanwhile, among them — aborts the batch, and _apply_slow redoes it
        event by event.
        """
        counts = DrainReport()
        letters: list[DeadLetter] = []
        parsed = [line.event for line in batch]
        seen = applied.known([e["id"] for e in parsed if isinstance(e, dict)])
        resolver = _Resolver(fleet)
        new: dict[int, dict[str, Any]] = {}  # position in the batch → the event, to apply
        for position, event in enumerate(parsed):
            if not isinstance(event, dict):
                continue
            if event["id"] in seen:
                counts.duplicates += 1
            else:
                seen.add(event["id"])  # the same id twice in one batch applies once
                new[position] = event
        resolver.note_sessions(new.values())
        fresh = {position: resolver.envelope(event) for position, event in new.items()}
        outcomes = dict(zip(fresh, self._outcomes(list(fresh.values())), strict=True))
        results: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for position, line in enumerate(batch):  # dead letters in spool order
            event = line.event
            if isinstance(event, str):
                letters.append(_letter(fleet, where, line, event))
            elif isinstance(event, dict) and position in outcomes:
                outcome = outcomes[position]
                if isinstance(outcome, InvalidEvent):
                    letters.append(_letter(fleet, where, line, str(outcome)))
                    results.append((event, {"dead_lettered": str(outcome)}))
                else:
                    results.append((event, outcome))
                    counts.applied += 1
        applied.record(fleet, results, source=where.source)
        resolver.flush()
        dead = _record_dead(letters)
        counts.dead += len(dead)
        if counts.applied:
            counts.fleets_changed.add(fleet.slug)
        return counts, dead

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
        self, fleet: Fleet, where: Where, batch: list[Line]
    ) -> tuple[DrainReport, list[DeadLetter]]:
        """Each event in its own savepoint: whatever one raises dead-letters only that one."""
        counts = DrainReport()
        letters: list[DeadLetter] = []
        resolver = _Resolver(fleet)
        for line in batch:
            event = line.event
            if not isinstance(event, dict):
                letters.append(_letter(fleet, where, line, str(event)))
                continue
            if AppliedEvent.objects.filter(event_id=event["id"]).exists():
                counts.duplicates += 1  # a replay, or a concurrent drain got there first
                continue
            try:
                with transaction.atomic():
                    result = self.appliers[event["kind"]](resolver.envelope(event))
                    AppliedEvent.objects.create(
                        event_id=event["id"], fleet=fleet, kind=event["kind"], result=result,
                        source=where.source,
                    )
            except InvalidEvent as exc:
                letters.append(_letter(fleet, where, line, str(exc)))
            except IntegrityError as exc:
                resolver.forget(event)
                if AppliedEvent.objects.filter(event_id=event["id"]).exists():
                    counts.duplicates += 1  # a concurrent drain applied it meanwhile
                else:
                    reason = f"refused by the database (IntegrityError): {exc}"
                    letters.append(_letter(fleet, where, line, reason))
            except Exception as exc:  # noqa: BLE001 - one event's failure is its own
                if _connection_lost(exc):
                    raise DrainStopped(str(exc)) from exc
                resolver.forget(event)
                reason = f"could not be applied ({type(exc).__name__}): {exc}"
                letters.append(_letter(fleet, where, line, reason))
            else:
                counts.applied += 1
                counts.fleets_changed.add(fleet.slug)
        resolver.flush()
        dead = _record_dead(letters)
        counts.dead += len(dead)
        return counts, dead

    @staticmethod
    def _advance(cursor: SpoolCursor, path: Path, offset: int) -> None:
        cursor.offset = offset
        cursor.path = str(path)
        cursor.updated_at = timezone.now()
        cursor.save(update_fields=["offset", "path", "updated_at"])

    def _write_dead_file(self, fleet: Fleet, letters: list[DeadLetter]) -> None:
        """Append the letters recorded by a committed batch to `<spool>/dead/<fleet>.ndjson`."""
        if not letters:
            return
        dead_dir = self.spool_dir / DEAD
        dead_dir.mkdir(parents=True, exist_ok=True)
        blob = "".join(
            json.dumps({"at": d.created_at.isoformat(), "file": d.file, "offset": d.offset,
                        "reason": d.reason, "line": d.line}) + "\n"
            for d in letters
        ).encode()
        fd = os.open(dead_dir / f"{fleet.slug}.ndjson", os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                     0o600)
        try:
            os.write(fd, blob)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _retire(self, path: Path, cursor: SpoolCursor) -> None:
        with transaction.atomic():
            with connection.cursor() as cur:  # this one commit must be durable before unlink
                cur.execute("SET LOCAL synchronous_commit = on")
            cursor.delete()
        path.unlink(missing_ok=True)
        self.report.files_retired += 1


def _connection_lost(exc: BaseException) -> bool:
    """True when `exc` means the database is gone (not just one statement refused)."""
    if not isinstance(exc, (InterfaceError, OperationalError)):
        return False
    try:
        return not connection.is_usable()
    except Exception:  # noqa: BLE001 - a check that cannot run means the link is down
        return True


def _letter(fleet: Fleet, where: Where, line: Line, reason: str) -> DeadLetter:
    """A dead-letter row: the reason and the line, scrubbed and storable."""
    text = line.raw[:DEAD_LINE_CHARS].decode("utf-8", "backslashreplace")
    event_id = line.event.get("id") if isinstance(line.event, dict) else None
    return DeadLetter(
        fleet=fleet, file=where.file, cursor_key=where.key, offset=line.start,
        event_id=event_id, reason=_storable(redact.scrub_text(reason))[:2000],
        line=_storable(redact.scrub_text(text)),
    )


def _storable(text: str) -> str:
    """Text Postgres accepts: NUL and lone surrogates shown as escapes, nothing dropped."""
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _record_dead(letters: list[DeadLetter]) -> list[DeadLetter]:
    """Insert the letters not already recorded (a replayed batch's are); return the new ones."""
    if not letters:
        return []
    keys = {(d.cursor_key, d.offset) for d in letters}
    known = set(
        DeadLetter.objects.filter(
            cursor_key__in={k for k, _ in keys}, offset__in={o for _, o in keys}
        ).values_list("cursor_key", "offset")
    )
    new = [d for d in letters if (d.cursor_key, d.offset) not in known]
    DeadLetter.objects.bulk_create(new, ignore_conflicts=True)
    return new


class _Resolver:
    """Agents and sessions named by events, created or updated once per batch."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.agents: dict[str, Agent] = {}
        self.sessions: dict[str, Session] = {}
        self.last_seen: dict[str, datetime] = {}

    @staticmethod
    def _at(event: dict[str, Any]) -> datetime:
        return min(contract.parse_time(event["at"]) or timezone.now(), timezone.now())

    def note_sessions(self, events: Iterable[dict[str, Any]]) -> None:
        """Record every session the events name (first and last seen), in one go per batch:
        a Session row is what makes a citation of that session verified."""
        events = list(events)
        self._load_agents({event["agent"] for event in events})
        seen: dict[str, tuple[Agent, datetime, datetime]] = {}
        for event in events:
            if not event.get("session"):
                continue
            agent, at = self._agent(event["agent"]), self._at(event)
            owner, first, last = seen.get(event["session"], (agent, at, at))
            if owner is agent:
                seen[event["session"]] = (agent, min(first, at), max(last, at))
        self.sessions.update(sessions.note_sessions_seen(self.fleet, seen))

    def envelope(self, event: dict[str, Any]) -> Envelope:
        at = self._at(event)
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

    def _load_agents(self, agent_ids: set[str]) -> None:
        """The fleet's agents among `agent_ids`, in one query for the batch (a
        get_or_create per agent was a query or two each); `_agent` creates the rest."""
        for agent in Agent.objects.filter(fleet=self.fleet,
                                          agent_id__in=agent_ids - self.agents.keys()):
            agent.fleet = self.fleet  # appliers read it; a fetched row would query for it
            self.agents[agent.agent_id] = agent

    def _agent(self, agent_id: str) -> Agent:
        if agent_id not in self.agents:
            agent = Agent.objects.get_or_create(fleet=self.fleet, agent_id=agent_id)[0]
            agent.fleet = self.fleet  # appliers read it; a fetched row would query for it
            self.agents[agent_id] = agent
        return self.agents[agent_id]

    def _session(self, session_id: str, agent: Agent, at: datetime) -> Session:
        if session_id not in self.sessions:
            seen = {session_id: (agent, at, at)}
            self.sessions.update(sessions.note_sessions_seen(self.fleet, seen))
        return self.sessions[session_id]

    def forget(self, event: dict[str, Any]) -> None:
        """Drop what `event` may have created in a savepoint that was rolled back."""
        # A missing id is None: pop finds nothing for it, as for any unknown id.
        self.agents.pop(cast(str, event.get("agent")), None)
        self.last_seen.pop(cast(str, event.get("agent")), None)
        self.sessions.pop(cast(str, event.get("session")), None)

    def flush(self) -> None:
        """Move each agent's last_seen_at forward (never back), in one statement."""
        if not self.last_seen:
            return
        sessions.note_agents_seen({self.agents[a].pk: at for a, at in self.last_seen.items()})


def _read_lines(f: BinaryIO, limit: int, budget: int) -> Iterator[Line]:
    """Up to `limit` complete lines from `f`'s position, stopping once they hold `budget`
    bytes (the line that reaches it included); a torn last line stays unread.

    Reads incrementally (one buffered line at a time), so a batch costs what its lines
    cost. A line longer than LINE_LIMIT_BYTES is skipped in pieces up to its newline and
    yielded once, already marked dead, with its first piece to show.
    """
    count = size = 0
    while count < limit and size < budget:
        start = f.tell()
        raw = f.readline(LINE_LIMIT_BYTES)
        if not raw:
            return
        oversized = not raw.endswith(b"\n") and len(raw) >= LINE_LIMIT_BYTES
        while oversized and not raw.endswith(b"\n"):
            piece = f.readline(LINE_LIMIT_BYTES)
            if not piece:
                break
            raw = raw[:LINE_LIMIT_BYTES] + piece[-1:]
        if not raw.endswith(b"\n"):
            f.seek(start)  # torn: the writer crashed mid-line, or is mid-line now
            return
        end = f.tell()
        body = raw.rstrip(b"\n")
        if body.strip():
            line = Line(start, end, body)
            if oversized:
                line.event = f"line is {end - start - 1} bytes; the limit is {LINE_LIMIT_BYTES}"
            yield line
            count += 1
            size += len(body)


def _parse(raw: bytes, fleet_slug: str) -> dict[str, Any] | str:
    """The event, scrubbed and checked against its kind's contract, or why it is dead."""
    try:
        event = events.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"not JSON: {exc}"
    if not isinstance(event, dict):
        return "not a JSON object"
    problem = contract.envelope_problem(event, fleet_slug, fleet_source="the spool file's fleet")
    if problem:
        return problem
    event["payload"] = redact.scrub_value(event["payload"])  # again, at ingest
    problem = events.problem(event["kind"], event["payload"])
    if problem:
        return f"payload: {problem}"
    return event
