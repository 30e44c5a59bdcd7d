"""`manage.py index_claims [--fleet F] [--commit]`: rebuild the claims' BM25 terms."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from claims import lexicon
from claims.models import Claim, ClaimTerm
from fleet.models import Fleet


class Command(BaseCommand):
    help = (
        "Rebuild every claim's lexical terms (ClaimTerm rows and lexical_length: what the "
        "server's BM25 reads), e.g. after the tokenizer changed. Dry run unless --commit."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", help="Only this fleet (slug).")
        parser.add_argument("--commit", action="store_true", help="Actually rewrite them.")

    def handle(self, *args: Any, fleet: str | None, commit: bool, **options: Any) -> None:
        scope = Fleet.objects.filter(slug=fleet).first() if fleet else None
        if fleet and scope is None:
            raise CommandError(f"no fleet {fleet!r}")
        claims = Claim.objects.filter(fleet=scope) if scope else Claim.objects.all()
        terms = ClaimTerm.objects.filter(fleet=scope) if scope else ClaimTerm.objects.all()
        total = claims.count()
        self.stdout.write(f"{total} claim(s); {terms.count()} term row(s) now")
        if not commit:
            self.stdout.write("Dry run; pass --commit to rebuild their terms.")
            return

        def progress(done: int, rows: int) -> None:
            self.stdout.write(f"  {done}/{total} claims, {rows} term rows")

        # what lexicon.write_terms writes on each term row (its copies: status, number)
        rows = claims.order_by("pk").only("pk", "fleet_id", "text", "subject", "status",
                                          "number")
        done, written = lexicon.rebuild(rows.iterator(chunk_size=2000), progress=progress)
        self.stdout.write(self.style.SUCCESS(f"Indexed {done} claim(s): {written} term rows"))
