"""`manage.py import_fleet PATH (--fleet NEW | --into EXISTING [--as-proposals])`.

Reads an export (a directory, a tar, or `-` for a tar on standard input), checks every
line of every file before writing anything, then writes it in one transaction
(ctxlake_site.fleet_export). Into a new fleet, claims keep their status; merged into an
existing fleet, live claims are filed as proposals, never promoted (and without
--as-proposals a decided claim is refused). A refusal names the file and the line.
Importing the same export twice changes nothing the second time. --dry-run does it all
and rolls it back, so the counts it prints are the real ones.
"""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import IO, Any, NoReturn, cast

from django.core.management.base import BaseCommand, CommandError

from ctxlake_site.fleet_export import archive, check, layout, load
from ctxlake_site.fleet_export.layout import Refused


class Command(BaseCommand):
    help = "Import a fleet export into a new fleet, or merge it into one as proposals."
    stealth_options = ("stdin",)

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("path", help="An export directory, a tar of one, or - (stdin).")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--fleet", help="Create this new fleet; claims keep their status.")
        target.add_argument("--into", help="Merge into this existing fleet.")
        parser.add_argument("--as-proposals", action="store_true",
                            help="With --into: file promoted claims as proposals too.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Check and count everything, then roll it back.")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="Print one JSON object at the end and nothing else.")
        parser.add_argument("--quiet", action="store_true", help="Print nothing but errors.")

    def handle(self, *args: Any, path: str, fleet: str | None, into: str | None,
               as_proposals: bool, dry_run: bool, as_json: bool, quiet: bool,
               **options: Any) -> None:
        if as_proposals and into is None:
            raise CommandError("--as-proposals goes with --into: a new fleet keeps statuses.")
        self.as_json, self.quiet = as_json, quiet or as_json
        stdin = cast("IO[bytes]", options.get("stdin") or sys.stdin.buffer)
        try:
            files = archive.read(path, stdin)
            checked = check.check_archive(files, merge=into is not None,
                                          as_proposals=as_proposals)
            self._checked(checked)
            outcome = load.import_archive(checked, fleet=fleet, into=into, dry_run=dry_run)
        except Refused as exc:
            self._refuse(str(exc), {"file": exc.file, "line": exc.line, "reason": exc.reason})
        except (load.TargetRefused, OSError) as exc:
            self._refuse(str(exc), {"reason": str(exc)})
        self._report(outcome, checked)

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.stdout.write(text)

    def _refuse(self, message: str, detail: dict[str, Any]) -> NoReturn:
        if self.as_json:
            self.stdout.write(json.dumps({"ok": False, **detail}))
        raise CommandError(f"Refused, nothing written: {message}")

    def _checked(self, checked: check.Checked) -> None:
        for name in layout.DATA_FILES:
            if name in checked.lines:
                self._say(f"checked {name}: {len(checked.lines[name])} line(s)")
        if checked.scrubbed:
            self._say(f"redacted secrets in {checked.scrubbed} line(s)")

    def _report(self, outcome: load.Outcome, checked: check.Checked) -> None:
        if self.as_json:
            self.stdout.write(json.dumps({"ok": True, **outcome.as_dict(),
                                          "redacted_lines": checked.scrubbed}))
            return
        if outcome.already_imported:
            self._say(f"{outcome.fleet}: this export was imported already; nothing to do.")
            return
        created = ", ".join(f"{k} {n}" for k, n in (+outcome.created).items()) or "nothing"
        unchanged = ", ".join(f"{k} {n}" for k, n in (+outcome.unchanged).items()) or "-"
        verb = "would create" if outcome.dry_run else "created"
        self._say(f"{outcome.fleet} ({outcome.mode}): {verb} {created}; unchanged: {unchanged}")
        if outcome.dry_run:
            self._say("Dry run: nothing was written.")
