"""`manage.py scan_secrets [--redact] [--json]`: find secrets already stored, and remove them.

For installations upgrading from an older redactor: whatever it let through sits in the
database, the cache, the spool and the dead letters. This scans every place with today's
rules (mcp_bridge.contract.redact) and reports, per place, how many records hold a
secret and of which kinds; with --redact it rewrites them:

- claims and their evidence through claims.moderation.redact_claim (one audit event each,
  naming the kinds removed, never the text);
- handoffs (summary, next steps; the version is bumped so a stale writer gets a 409),
  sessions (summary, repo, branch), lease reasons, activity data and the dead-letter
  table's lines and reasons in place;
- dead-letter and cache files rewritten atomically; the caches of fleets in the database
  are re-rendered from the cleaned rows first, a snapshot is rebuilt into a new file and
  renamed over (never changed in place);
- spool files rewritten in place under the fleet's append lock, and the drain's cursor
  moved to the same line in the new bytes. Run it with the drain stopped.

Claim events are append-only (a trigger refuses UPDATE): they are reported, not rewritten.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from argparse import ArgumentParser
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from claims import moderation
from claims.models import Claim, ClaimEvent, Evidence
from ctxlake_site import paths, workers
from fleet.models import Activity, DeadLetter, Fleet, Handoff, Lease, Session, SpoolCursor
from mcp_bridge import contract
from mcp_bridge.contract import atomic, redact
from mcp_bridge.contract.spool import Flock


@dataclass
class Place:
    name: str
    scanned: int = 0
    found: int = 0
    rewritten: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    note: str = ""

    def saw(self, kinds: Iterable[str]) -> bool:
        self.scanned += 1
        kinds = list(kinds)
        if kinds:
            self.found += 1
            self.kinds.update(kinds)
        return bool(kinds)

    def as_dict(self) -> dict[str, Any]:
        out = {"scanned": self.scanned, "found": self.found, "rewritten": self.rewritten,
               "kinds": dict(sorted(self.kinds.items()))}
        return {**out, "note": self.note} if self.note else out


class Command(BaseCommand):
    help = "Scan stored claims, evidence, handoffs, sessions, activity, dead letters, cache " \
           "and spool for secrets; --redact removes them."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--redact", action="store_true", dest="fix",
                            help="Rewrite what holds a secret.")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="Print one JSON object at the end and nothing else.")

    def handle(self, *args: Any, fix: bool, as_json: bool, **options: Any) -> None:
        self.fix, self.quiet = fix, as_json
        places = [
            self._claims(), self._evidence(), self._claim_events(),
            # a handoff's rewrite moves its version on (fleet 0019's trigger), so an agent
            # holding the old text cannot swap on it unawares
            self._rows("handoffs", Handoff.objects.all(), ("summary", "next_steps")),
            self._rows("sessions", Session.objects.all(), ("summary", "repo", "branch")),
            self._rows("leases", Lease.objects.all(), ("reason",)),
            self._activity(),
            self._rows("dead-letter rows", DeadLetter.objects.all(), ("line", "reason")),
            self._dead_letters(),
            self._spool(),
            self._cache(),
        ]
        if as_json:
            self.stdout.write(json.dumps({"redact": fix,
                                          "places": {p.name: p.as_dict() for p in places},
                                          "found": sum(p.found for p in places)}))
            return
        total = sum(p.found for p in places)
        verb = "rewritten" if fix else "found (run again with --redact to remove them)"
        self.stdout.write(f"{total} record(s) with secrets {verb}.")

    # --- progress -----------------------------------------------------------------------
    def _done(self, place: Place) -> Place:
        if not self.quiet:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(place.kinds.items())) or "-"
            line = (f"{place.name}: {place.scanned} scanned, {place.found} with secrets "
                    f"({kinds})")
            if self.fix:
                line += f", {place.rewritten} rewritten"
            self.stdout.write(line + (f" [{place.note}]" if place.note else ""))
        return place

    def _tick(self, place: Place) -> None:
        if not self.quiet and place.scanned and place.scanned % 1000 == 0:
            self.stdout.write(f"  {place.name}: {place.scanned} scanned, {place.found} found…")

    # --- database -------------------------------------------------------------------------
    def _claims(self) -> Place:
        place = Place("claims")
        for claim in Claim.objects.order_by("pk").iterator():
            if place.saw(redact.find_secrets([claim.text, claim.subject])) and self.fix:
                moderation.redact_claim(claim, note="secrets redacted (scan_secrets)")
                place.rewritten += 1
            self._tick(place)
        return self._done(place)

    def _evidence(self) -> Place:
        place = Place("evidence")
        fields = moderation.CITATION_FIELDS
        for e in Evidence.objects.order_by("pk").select_related("claim").iterator():
            if place.saw(redact.find_secrets([getattr(e, f) for f in fields])) and self.fix:
                moderation.redact_claim(e.claim, note="secrets redacted (scan_secrets)")
                place.rewritten += 1
            self._tick(place)
        return self._done(place)

    def _claim_events(self) -> Place:
        place = Place("claim events", note="append-only: reported, not rewritten")
        for event in ClaimEvent.objects.order_by("pk").iterator():
            place.saw(redact.find_secrets([event.note, event.data]))
            self._tick(place)
        return self._done(place)

    def _rows(self, name: str, rows: Any, fields: tuple[str, ...]) -> Place:
        place = Place(name)
        for row in rows.order_by("pk").iterator():
            values = [getattr(row, f) or "" for f in fields]
            if place.saw(redact.find_secrets(values)) and self.fix:
                changes: dict[str, Any] = {
                    f: redact.scrub_text(v) for f, v in zip(fields, values, strict=True)}
                type(row).objects.filter(pk=row.pk).update(**changes)
                place.rewritten += 1
            self._tick(place)
        return self._done(place)

    def _activity(self) -> Place:
        place = Place("activity", note="the log is append-only; only scrubbed data is rewritten")
        for row in Activity.objects.order_by("pk").iterator():
            if place.saw(redact.find_secrets(row.data)) and self.fix:
                Activity.objects.filter(pk=row.pk).update(data=redact.scrub_value(row.data))
                place.rewritten += 1
            self._tick(place)
        return self._done(place)

    # --- files ------------------------------------------------------------------------------
    def _ndjson(self, place: Place, data: bytes) -> tuple[bytes, list[tuple[int, int]]]:
        """The scrubbed lines and, per line, (old end offset, new end offset)."""
        out, ends, old_at = [], [], 0
        for raw in data.splitlines(keepends=True):
            old_at += len(raw)
            complete = raw.endswith(b"\n")
            body = raw.rstrip(b"\n")
            text = body.decode("utf-8", "backslashreplace")
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if value is not None:
                kinds = redact.find_secrets(value)
                new = json.dumps(redact.scrub_value(value), ensure_ascii=True,
                                 separators=(",", ":")).encode() if kinds else body
            else:
                kinds = redact.find_secrets(text)
                new = redact.scrub_text(text).encode() if kinds else body
            place.saw(kinds)
            out.append(new + (b"\n" if complete else b""))
            ends.append((old_at, sum(len(x) for x in out)))
        return b"".join(out), ends

    def _dead_letters(self) -> Place:
        place = Place("dead letters")
        for path in sorted((paths.spool_dir() / "dead").glob("*.ndjson")):
            data = path.read_bytes()
            found = place.found
            new, _ = self._ndjson(place, data)
            if self.fix and place.found > found:
                atomic.write_atomic(path, new, mode=0o600)
                place.rewritten += place.found - found
        return self._done(place)

    def _spool(self) -> Place:
        place = Place("spool")
        root = paths.spool_dir() / contract.SPOOL_SUBDIR
        for path in sorted(root.glob(f"*{contract.SPOOL_SUFFIX}")):
            fleet_id = path.name.split(".", 1)[0]
            with Flock(root / f"{fleet_id}.lock"):  # no bridge appends while we rewrite
                data = path.read_bytes()
                found = place.found
                new, ends = self._ndjson(place, data)
                if self.fix and place.found > found:
                    self._rewrite_spool_file(path, new, ends)
                    place.rewritten += place.found - found
        return self._done(place)

    @staticmethod
    def _rewrite_spool_file(path: Path, new: bytes, ends: list[tuple[int, int]]) -> None:
        """In place (the drain's cursor is keyed by inode), with the cursor moved to the
        end of the same line in the new bytes."""
        stat = path.stat()
        with transaction.atomic():
            cursor = SpoolCursor.objects.select_for_update().filter(
                device=stat.st_dev, inode=stat.st_ino).first()
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, new, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            if cursor is not None:
                moved = max((n for o, n in ends if o <= cursor.offset), default=0)
                SpoolCursor.objects.filter(pk=cursor.pk).update(offset=moved)

    def _cache(self) -> Place:
        place = Place("cache")
        root = paths.cache_dir()
        if self.fix:  # the cleaned rows first: a render writes the cache the contract's way
            for fleet in Fleet.objects.all():
                if (root / fleet.slug).is_dir():
                    workers.render_fleet(fleet)
        for directory in sorted(p for p in root.glob("*") if p.is_dir()):
            for path in sorted(directory.iterdir()):
                if path.name.startswith(".") or not path.is_file():
                    continue
                if path.suffix == ".sqlite":
                    self._snapshot(place, path)
                elif path.suffix in (".json", ".md", ".txt"):
                    self._text_file(place, path)
        return self._done(place)

    def _text_file(self, place: Place, path: Path) -> None:
        text = path.read_text("utf-8", "backslashreplace")
        scrub: Callable[[], str]
        try:
            value = json.loads(text) if path.suffix == ".json" else None
        except ValueError:
            value = None
        if value is not None:
            kinds = redact.find_secrets(value)
            scrub = lambda: json.dumps(redact.scrub_value(value), indent=2)  # noqa: E731
        else:
            kinds = redact.find_secrets(text)
            scrub = lambda: redact.scrub_text(text)  # noqa: E731
        if place.saw(kinds) and self.fix:
            atomic.write_atomic(path, scrub().encode())
            place.rewritten += 1

    def _snapshot(self, place: Place, path: Path) -> None:
        """Every text cell of every ordinary table; --redact rebuilds a copy and renames it
        over the snapshot (the bridge opens it immutable: never an UPDATE on the live file)."""
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            dirty = self._snapshot_cells(con)
        finally:
            con.close()
        for _, _, _, kinds in dirty:
            place.saw(kinds)
        place.scanned += 1
        if not (dirty and self.fix):
            return
        tmp = atomic.temp_path(path)
        shutil.copyfile(path, tmp)
        con = sqlite3.connect(tmp)
        try:
            for table, column, rowid, _ in dirty:
                value = con.execute(f'SELECT "{column}" FROM "{table}" WHERE rowid = ?',
                                    (rowid,)).fetchone()[0]
                con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?',
                            (redact.scrub_text(value), rowid))
            if "claims" in {t for t, _, _, _ in dirty}:
                con.execute(contract.SNAPSHOT_FTS_REBUILD)
            con.commit()
        finally:
            con.close()
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        atomic.fsync_dir(path.parent)
        place.rewritten += len(dirty)

    @staticmethod
    def _snapshot_cells(con: sqlite3.Connection) -> list[tuple[str, str, int, list[str]]]:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE "
            "'CREATE VIRTUAL%' AND name NOT LIKE '%fts%' AND name NOT LIKE 'sqlite_%'")]
        dirty = []
        for table in tables:
            columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')
                       if r[2].upper() == "TEXT"]
            for column in columns:
                for rowid, value in con.execute(f'SELECT rowid, "{column}" FROM "{table}"'):
                    if isinstance(value, str):
                        kinds = redact.find_secrets(value)
                        if kinds:
                            dirty.append((table, column, rowid, kinds))
        return dirty
