"""`manage.py ensure_schedules`: create or update ctxlake's django-q2 schedules by name."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ctxlake_site import workers


class Command(BaseCommand):
    help = "Create or update the periodic jobs (drain, lease expiry, full render); idempotent."

    def handle(self, *args: Any, **options: Any) -> None:
        for name in workers.ensure_schedules():
            self.stdout.write(f"schedule {name}: ok")
