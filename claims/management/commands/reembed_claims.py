"""`manage.py reembed_claims [--fleet F] [--all] [--commit]`: (re)compute claim embeddings."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from claims import embeddings
from claims.models import Claim
from fleet import rendering
from fleet.models import Fleet


class Command(BaseCommand):
    help = (
        "Embed claims that lack a vector from the current model (or all with --all). "
        "Dry run unless --commit."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", help="Only this fleet (slug).")
        parser.add_argument(
            "--all",
            action="store_true",
            dest="everything",
            help="Recompute every claim, not only stale ones.",
        )
        parser.add_argument("--batch", type=int, default=embeddings.BATCH)
        parser.add_argument("--commit", action="store_true", help="Actually write the vectors.")
        parser.add_argument("--quiet", action="store_true")
        parser.add_argument("--json", action="store_true", dest="as_json")

    def handle(
        self,
        *args: Any,
        fleet: str | None,
        everything: bool,
        batch: int,
        commit: bool,
        quiet: bool,
        as_json: bool,
        **options: Any,
    ) -> None:
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        scope = Fleet.objects.filter(slug=fleet).first() if fleet else None
        if fleet and scope is None:
            raise CommandError(f"no fleet {fleet!r}")
        todo = (
            (Claim.objects.filter(fleet=scope) if scope else Claim.objects.all())
            if everything
            else embeddings.needing_embedding(scope)
        )
        total = todo.count()
        model = embeddings.embedder().NAME
        if not commit:
            self._say(
                quiet,
                as_json,
                {"to_embed": total, "model": model, "committed": False},
                f"{total} claim(s) to embed with {model}. Dry run; pass --commit.",
            )
            return
        chatty = not (quiet or as_json)

        def progress(done: int, rate: float) -> None:
            self.stdout.write(f"  {done}/{total} embedded with {model} ({rate:.0f} claims/s)")

        done = embeddings.embed_claims(todo, batch=batch, progress=progress if chatty else None)
        for one in Fleet.objects.filter(claims__status="promoted").distinct():
            rendering.request_render(one)
        self._say(
            quiet,
            as_json,
            {"embedded": done, "model": model, "committed": True},
            f"Embedded {done} claim(s) with {model}.",
        )

    def _say(self, quiet: bool, as_json: bool, data: dict[str, Any], text: str) -> None:
        if as_json:
            self.stdout.write(json.dumps(data))
        elif not quiet:
            self.stdout.write(text)
