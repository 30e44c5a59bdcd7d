"""`manage.py embedded_db status|start|stop`: the embedded Postgres, for operators.

`stop` sticks: until `start` (or the next `./ctxlake up`), no process starts the server
again; they answer "database stopped" instead (see ctxlake_site.embedded_db).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ctxlake_site import embedded_db, paths


class Command(BaseCommand):
    help = "Show, start or stop the embedded Postgres server (used when DATABASE_URL is unset)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("action", choices=("status", "start", "stop"))

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if settings.DATABASES["default"]["ENGINE"] != "ctxlake_site.embedded_pg":
            raise CommandError("DATABASE_URL is set: the embedded server is not in use.")
        if action == "stop":
            stopped = embedded_db.stop()
            self.stdout.write(
                ("stopped" if stopped else "not running")
                + "; it stays stopped until `manage.py embedded_db start` or `./ctxlake up`"
            )
            return
        if action == "status":
            why = embedded_db.stopped_on_purpose()
            if why is not None:
                self.stdout.write(f"stopped ({why}); data {paths.pg_data_dir()}")
                return
            if not embedded_db.is_running():
                self.stdout.write(f"not running (data {paths.pg_data_dir()}); it starts on "
                                  "first use")
                return
        server = embedded_db.start() if action == "start" else embedded_db.attach()
        self.stdout.write(f"running: pid {server.pid}, data {server.data_dir}, uri {server.uri}")
