"""`manage.py expire_leases [--commit]`: release leases past their TTL."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from fleet import leases


class Command(BaseCommand):
    help = "Expire advisory leases past their TTL. Dry run unless --commit."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--commit", action="store_true", help="Actually expire them.")

    def handle(self, *args: Any, commit: bool, **options: Any) -> None:
        stale = leases.stale_leases()
        self.stdout.write(f"{len(list(stale))} stale lease(s)")
        if not commit:
            self.stdout.write("Dry run; pass --commit to expire them.")
            return
        self.stdout.write(self.style.SUCCESS(f"Expired {leases.expire_leases()}"))
