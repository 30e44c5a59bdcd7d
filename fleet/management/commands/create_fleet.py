"""`manage.py create_fleet SLUG`: create (or show) a fleet."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from fleet.models import RETAIN_MAX_DAYS, RETENTION, CaptureMode, Fleet, MemoryMode, Retention
from mcp_bridge.contract import events as ev


class Command(BaseCommand):
    help = "Create a fleet; an existing fleet with that slug is left as it is."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--memory-mode", choices=MemoryMode.values, default=MemoryMode.SHADOW)
        parser.add_argument(
            "--capture", choices=CaptureMode.values, default=CaptureMode.CANDIDATES,
            help="What session-end capture proposes from agents' transcripts (docs/capture.md).",
        )
        parser.add_argument(
            "--lease-ttl", type=int, default=3600,
            help=f"Default lease TTL, seconds ({ev.TTL_MIN_SECS}–{ev.TTL_MAX_SECS}; default 3600).",
        )
        for rule in RETENTION:
            parser.add_argument(
                _option(rule), type=int, default=None, dest=rule.field, metavar="DAYS",
                help=f"Days to keep {rule.what} (0 keeps them; else {rule.min_days}–"
                     f"{RETAIN_MAX_DAYS}; default {rule.default_days}).",
            )

    def handle(
        self, *args: Any, slug: str, name: str, memory_mode: str, capture: str, lease_ttl: int,
        **options: Any,
    ) -> None:
        ages = {r.field: options[r.field] for r in RETENTION if options.get(r.field) is not None}
        fleet = Fleet(
            slug=slug, name=name or slug, memory_mode=memory_mode, capture_mode=capture,
            default_lease_ttl_secs=lease_ttl, **ages,
        )
        try:
            fleet.full_clean(validate_unique=False)
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from None
        existing, created = Fleet.objects.get_or_create(
            slug=slug,
            defaults={
                "name": fleet.name,
                "memory_mode": memory_mode,
                "capture_mode": capture,
                "default_lease_ttl_secs": lease_ttl,
                **ages,
            },
        )
        verb = "created" if created else "exists"
        self.stdout.write(f"fleet {existing.slug} {verb} (memory mode {existing.memory_mode}, "
                          f"capture {existing.capture_mode})")


def _option(rule: Retention) -> str:
    """`retain_activity_days` → `--retain-activity-days`: one name, from the field."""
    return "--" + rule.field.replace("_", "-")
