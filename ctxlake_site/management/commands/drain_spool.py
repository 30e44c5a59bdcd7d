"""`manage.py drain_spool [--fleet F] [--requeue F]`: apply agents' spooled writes now."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ctxlake_site import paths, workers
from ctxlake_site.drain import DrainReport, requeue_quarantined


class Command(BaseCommand):
    help = "Apply every complete spool line once; bad lines go to the dead-letter file."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", help="Only this fleet's spool.")
        parser.add_argument(
            "--requeue",
            metavar="FLEET",
            help="Put FLEET's quarantined spool files back (after create_fleet), then drain.",
        )
        parser.add_argument("--quiet", action="store_true", help="Print nothing but errors.")
        parser.add_argument(
            "--json",
            action="store_true",
            dest="as_json",
            help="Print one JSON object with the counts.",
        )

    def handle(
        self, *args: Any, fleet: str | None, requeue: str | None, quiet: bool, as_json: bool,
        **options: Any,
    ) -> None:
        chatty = not (quiet or as_json)
        if requeue:
            moved = requeue_quarantined(paths.spool_dir(), requeue)
            if chatty:
                self.stdout.write(f"requeued {moved} quarantined file(s) of fleet {requeue!r}")

        def progress(r: DrainReport) -> None:
            self.stdout.write(f"  applied {r.applied}, duplicates {r.duplicates}, dead {r.dead}")

        report = workers.drain_spool(fleet, progress=progress if chatty else None)
        if as_json:
            self.stdout.write(json.dumps(report.as_dict()))
        elif chatty:
            self.stdout.write(
                f"drained: {report.applied} applied, {report.duplicates} already applied, "
                f"{report.dead} dead-lettered, {report.files_retired} file(s) retired"
            )
        for name in report.quarantined:
            slug = name.split(".", 1)[0]
            self.stderr.write(
                f"fleet {slug!r} does not exist: spool file quarantined as {name} "
                f"(manage.py create_fleet {slug}, then manage.py drain_spool --requeue {slug})"
            )
        for slug, reason in report.failed_fleets.items():
            self.stderr.write(f"fleet {slug!r}: drain stopped: {reason}")
