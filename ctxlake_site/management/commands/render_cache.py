"""`manage.py render_cache [--fleet F]`: write fleets' cache files for the bridge now."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ctxlake_site import workers
from fleet.models import Fleet


class Command(BaseCommand):
    help = "Render the cache (roster, history, handoffs, snapshot, briefing, manifest)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", help="Only this fleet (slug).")
        parser.add_argument("--quiet", action="store_true", help="Print nothing but errors.")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="Print one JSON object per fleet."
        )

    def handle(
        self, *args: Any, fleet: str | None, quiet: bool, as_json: bool, **options: Any
    ) -> None:
        fleets = Fleet.objects.all()
        if fleet:
            fleets = fleets.filter(slug=fleet)
            if not fleets.exists():
                raise CommandError(f"no fleet {fleet!r}")
        total = fleets.count()
        for n, one in enumerate(fleets, start=1):
            report = workers.render_fleet(one)
            if as_json:
                self.stdout.write(json.dumps(report.__dict__))
            elif not quiet:
                self.stdout.write(
                    f"[{n}/{total}] {report.fleet}: {report.claims} claim(s), {report.seconds:.2f}s"
                )
