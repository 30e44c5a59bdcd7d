"""What fleet announces for other apps to act on: fleet never imports them.

`paths_reported` is sent when an agent says, through the REST API, that it is about to
change files (a lease claim) or has changed them (a session end naming them). The claims
app listens and marks claims citing those files possibly stale (claims.staleness). The
spool drain does the same composition directly in ctxlake_site.workers, where the marked
claims also go into each event's recorded result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.dispatch import Signal

from fleet.models import Agent, Fleet, Session


@dataclass(frozen=True)
class PathReport:
    """Paths a session says it is about to change (a lease) or changed (a session end)."""

    paths: Sequence[str]
    at: datetime
    session: Session | None = None
    agent: Agent | None = None
    source: str = "lease.claim"


paths_reported = Signal()  # send(sender, fleet=Fleet, reports=list[PathReport])


def report_paths(sender: object, fleet: Fleet, reports: list[PathReport]) -> None:
    """Announce `reports` (nothing is sent for reports without paths)."""
    reports = [r for r in reports if r.paths]
    if reports:
        paths_reported.send(sender=sender, fleet=fleet, reports=reports)
