"""`manage.py maintain_db [--commit]`: vacuum, analyze, and rebuild bloated search indexes."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ctxlake_site import db_health


class Command(BaseCommand):
    help = (
        "VACUUM (ANALYZE) ctxlake's tables and REINDEX (concurrently) the HNSW/GIN indexes "
        "that bulk deletes left bloated. Without --commit, only report what it would do."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--commit", action="store_true", help="Do it (default: dry run).")

    def handle(self, *args: Any, commit: bool, **options: Any) -> None:
        db_health.maintain(commit=commit, say=self.stdout.write)
