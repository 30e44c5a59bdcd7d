"""Site-wide rows that belong to no domain app."""

from __future__ import annotations

from django.db import models


class RateWindow(models.Model):
    """How many requests one API caller made in one fixed window (see api.TokenRateThrottle).

    A row per caller and window, counted with one atomic upsert, so every web worker and
    host shares the count; rows of past windows are deleted as requests go by. The table
    is UNLOGGED (migration 0002): a count's commit waits for no WAL flush, and a crash
    only restarts the current window's counts.
    """

    key = models.CharField(max_length=96, primary_key=True, help_text="caller:window")
    count = models.IntegerField(default=0)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.key}: {self.count}"
