"""`manage.py embedded_db status|start|stop`: the embedded Postgres, for operators."""

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
            self.stdout.write("stopped" if stopped else "not running")
            return
        if action == "status" and not embedded_db.is_running():
            self.stdout.write(f"not running (data {paths.pg_data_dir()})")
            return
        server = embedded_db.attach()
        self.stdout.write(f"running: pid {server.pid}, data {server.data_dir}, uri {server.uri}")
