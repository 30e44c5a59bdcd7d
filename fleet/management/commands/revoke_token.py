"""`manage.py revoke_token --fleet F (--name N | --prefix P)`: a revoked token is 401."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet import tokens
from fleet.models import ApiToken


class Command(BaseCommand):
    help = "Revoke a fleet's API token by name or prefix; it stops working at once."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", required=True, help="Fleet slug.")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--name")
        which.add_argument("--prefix", help="The prefix shown when it was issued (ctx_…).")

    def handle(
        self, *args: Any, fleet: str, name: str | None, prefix: str | None, **options: Any
    ) -> None:
        qs = ApiToken.objects.filter(fleet__slug=fleet, revoked_at__isnull=True)
        qs = qs.filter(name=name) if name else qs.filter(prefix=prefix)
        found = list(qs.select_related("fleet"))
        if not found:
            raise CommandError(f"No live token {name or prefix!r} in fleet {fleet!r}.")
        if len(found) > 1:
            raise CommandError(f"{len(found)} live tokens match; revoke by --name instead.")
        tokens.revoke_token(found[0])
        self.stdout.write(f"Revoked {found[0].name!r} ({found[0].prefix}…) in fleet {fleet}.")
