"""`manage.py collect_artifacts [--older-than HOURS] [--commit] [--json] [--quiet]`:
delete the object store's orphans (fleet.artifact_orphans); a dry run without --commit."""

from __future__ import annotations

import dataclasses
import json
import math
from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet import artifact_orphans, artifact_store

MAX_HOURS = 24 * 365 * 10  # ten years: more is a typo, and timedelta overflows past ~2.7M
PROGRESS_EVERY = 1000
DEFAULT_HOURS = artifact_orphans.GRACE / timedelta(hours=1)  # the daily job's grace


def hours(value: Any) -> timedelta:
    """--older-than as a timedelta; CommandError for anything but 0..MAX_HOURS hours."""
    text = str(value)
    try:
        number = float(text) if text.isprintable() else math.nan
    except ValueError:
        number = math.nan
    if not 0 <= number <= MAX_HOURS:  # also refuses NaN and the infinities
        raise CommandError(f"--older-than {ascii(text)[:40]}: hours from 0 to {MAX_HOURS} "
                           "(e.g. 24, or 0.5)")
    return timedelta(hours=number)


class Command(BaseCommand):
    help = ("Delete objects under CTXLAKE_S3_PREFIX that no cache row uses and that are older "
            "than --older-than hours. Dry run unless --commit. Exits 1 if a delete or the "
            "listing failed.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--older-than", default=f"{DEFAULT_HOURS:g}", metavar="HOURS",
                            help=f"Grace period in hours (default {DEFAULT_HOURS:g}): younger "
                                 "objects stay.")
        parser.add_argument("--commit", action="store_true",
                            help="Actually delete them (without it: count what would go).")
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
        parser.add_argument("--quiet", action="store_true", help="No progress on stderr.")

    def handle(self, *args: Any, **options: Any) -> None:
        grace = hours(options["older_than"])
        as_json = bool(options["json"])
        if not artifact_store.configured():
            self._say({"configured": False}, as_json,
                      "No object store configured (CTXLAKE_S3_BUCKET unset): nothing to collect.")
            return
        quiet = options["quiet"] or options.get("verbosity", 1) == 0
        report = artifact_orphans.collect_orphans(
            older_than=grace, dry_run=not options["commit"], every=PROGRESS_EVERY,
            progress=None if quiet else self._progress)
        self._say({"configured": True, **dataclasses.asdict(report)}, as_json, report.summary())
        if report.incomplete:
            raise CommandError(f"Collection stopped early: {report.incomplete}", returncode=1)
        if report.failed:
            raise CommandError(f"{report.failed} delete(s) failed and were left (logged with "
                               "the store's error); run again when the store answers.",
                               returncode=1)

    def _say(self, fields: dict[str, Any], as_json: bool, text: str) -> None:
        self.stdout.write(json.dumps(fields) if as_json else text)

    def _progress(self, report: artifact_orphans.Report) -> None:
        self.stderr.write(report.summary())
