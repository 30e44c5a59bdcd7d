"""What fleet announces for other apps to act on: fleet never imports them.

`paths_reported` is sent by fleet.actions when an agent says — over REST or through its
spool — that it is about to change files (a lease claim) or has changed them (a session
end naming them). The claims app listens and marks claims citing those files possibly
stale (claims.staleness). Receivers run synchronously, inside the action's transaction,
and return the public ids they marked per report, which go into the write's result.
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


#: send(sender, fleet=Fleet, reports=list[PathReport]); a receiver returns, per report, the
#: public ids of what it marked.
paths_reported = Signal()


def report_paths(sender: object, fleet: Fleet, reports: list[PathReport]) -> list[list[str]]:
    """Announce `reports`; per report (in order), the ids every receiver marked."""
    marks: list[list[str]] = [[] for _ in reports]
    with_paths = [i for i, r in enumerate(reports) if r.paths]
    if not with_paths:
        return marks
    answers = paths_reported.send(sender=sender, fleet=fleet,
                                  reports=[reports[i] for i in with_paths])
    for _, marked in answers:
        for i, ids in zip(with_paths, marked or [[] for _ in with_paths], strict=True):
            marks[i].extend(ids)
    return marks
