"""What the spool → drain → render pipeline is doing, per fleet: read-only, for people.

`doctor`, the admin index's pipeline panel and `GET /api/v1/health` all show this one
reading, so they can never disagree. Nothing here changes state; every number comes from
the files and rows the pipeline itself keeps:

- backlog: spool lines past the drain's cursor (SpoolCursor, keyed by the file's inode),
  plus the fleet's inbox rows (lines received over REST, fleet.inbox; `inbox_lines` says
  how many of the backlog those are), and the age of the oldest of them (a spool line's
  event `at`, an inbox row's receipt);
- dead letters: DeadLetter rows, one per line the drain refused (copied to
  `<spool>/dead/<fleet>.ndjson`);
- rejected: `<spool>/rejected/<fleet>.ndjson`, lines a `sync` host's server refused
  (present when that host shares this spool directory);
- quarantined: spool files of fleets that do not exist, moved by the drain to
  `<spool>/quarantine/` (drain.QUARANTINE); files of unknown fleets still in `<spool>/mcp/`
  are listed too, as waiting;
- render: the stored render's time (fleet.artifacts, what every web host serves) against
  the fleet's last activity, and whether a render is queued; last drain: the fleet's
  newest applied event;
- workers: django-q2's cluster heartbeat.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.cache import cache as shared_cache
from django.db.models import QuerySet
from django.utils import timezone

from ctxlake_site import drain, paths
from fleet import inbox, rendering
from fleet.models import Activity, AppliedEvent, CacheHead, DeadLetter, Fleet, SpoolCursor
from mcp_bridge import contract

REJECTED_SUBDIR = "rejected"
RENDER_STAMP_SLACK = timedelta(seconds=1)
READ_LIMIT = 64 << 20  # never read more than this of one spool file to count its backlog


@dataclass
class SpoolFile:
    fleet: str
    path: str
    bytes: int
    lines: int
    modified: datetime


@dataclass
class FleetPipeline:
    fleet: str
    backlog_lines: int = 0
    inbox_lines: int = 0
    backlog_oldest: datetime | None = None
    dead_letters: int = 0
    dead_newest_reason: str | None = None
    rejected: int = 0
    rejected_newest_reason: str | None = None
    rendered_at: datetime | None = None
    last_activity: datetime | None = None
    render_queued: bool = False
    last_drain: datetime | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def cache_behind(self) -> bool:
        """The fleet changed after its cache was rendered (or it was never rendered).

        `generated_at` has whole seconds; a change within the second after it counts as
        rendered (RENDER_STAMP_SLACK), so a fleet is not reported behind by its own render.
        """
        if self.rendered_at is None:
            return True
        return (self.last_activity is not None
                and self.last_activity > self.rendered_at + RENDER_STAMP_SLACK)


@dataclass
class Pipeline:
    fleets: list[FleetPipeline]
    quarantined: list[SpoolFile]
    waiting: list[SpoolFile]  # unknown fleets' files the drain has not quarantined (yet)
    clusters: list[str]
    checked_at: datetime

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = jsonable(asdict(self))
        for row, fleet in zip(out["fleets"], self.fleets, strict=True):
            row["cache_behind"] = fleet.cache_behind
        return out


def quarantined_files(spool_dir: Path | None = None) -> list[SpoolFile]:
    """Every file in `<spool>/quarantine/` (the fleet is the name's part before the first dot)."""
    root = (spool_dir or paths.spool_dir()) / drain.QUARANTINE
    if not root.is_dir():
        return []
    return [_spool_file(p) for p in sorted(root.iterdir()) if p.is_file()]


def waiting_files(spool_dir: Path | None = None) -> list[SpoolFile]:
    """Spool files in `<spool>/mcp/` whose fleet does not exist."""
    by_fleet = drain.fleet_files(spool_dir or paths.spool_dir())
    known = set(Fleet.objects.filter(slug__in=by_fleet).values_list("slug", flat=True))
    return [_spool_file(p) for slug, files in by_fleet.items() if slug not in known
            for p in files]


def spool_files(spool_dir: Path | None = None) -> list[SpoolFile]:
    """Every fleet's files in `<spool>/mcp/`, read from the files alone (no query).

    What can be said with the database down: the drain's cursors are rows, so these counts
    are the lines the files hold, an upper bound on the backlog (the active file keeps the
    lines already applied until it rotates; a rotated file is removed once applied).
    """
    return [_spool_file(p) for files in drain.fleet_files(spool_dir or paths.spool_dir()).values()
            for p in files]


def for_fleet(fleet: Fleet, *, spool_dir: Path | None = None) -> FleetPipeline:
    spool_dir = spool_dir or paths.spool_dir()
    out = FleetPipeline(fleet.slug)
    backlogs = [_backlog(path) for path in drain.fleet_files(spool_dir).get(fleet.slug, [])]
    out.inbox_lines, received = inbox.backlog(fleet)
    backlogs.append((out.inbox_lines, received))
    for lines, oldest in backlogs:
        out.backlog_lines += lines
        if oldest and (out.backlog_oldest is None or oldest < out.backlog_oldest):
            out.backlog_oldest = oldest
    letters = DeadLetter.objects.filter(fleet=fleet)  # the record; the dead/ file is a copy
    out.dead_letters = letters.count()
    out.dead_newest_reason = (
        letters.values_list("reason", flat=True).first() if out.dead_letters else None
    )
    out.rejected, out.rejected_newest_reason = _records(
        spool_dir / REJECTED_SUBDIR / f"{fleet.slug}{contract.SPOOL_SUFFIX}")
    out.rendered_at = (
        CacheHead.objects.filter(fleet=fleet, name=contract.MANIFEST)
        .values_list("rendered_at", flat=True).first()
    )
    out.last_activity = (
        Activity.objects.filter(fleet=fleet).order_by("-at").values_list("at", flat=True).first()
    )
    out.last_drain = (
        AppliedEvent.objects.filter(fleet=fleet).order_by("-applied_at")
        .values_list("applied_at", flat=True).first()
    )
    out.render_queued = shared_cache.get(rendering.pending_key(fleet.pk)) is not None
    if out.rendered_at is None:
        out.problems.append("never rendered")
    elif out.cache_behind and not out.render_queued:
        out.problems.append("cache older than the last change and no render queued")
    if out.dead_letters:
        out.problems.append(f"{out.dead_letters} dead letter(s)")
    if out.rejected:
        out.problems.append(f"{out.rejected} line(s) rejected by the server")
    return out


def overview(*, fleets: QuerySet[Fleet] | None = None, spool_dir: Path | None = None,
             ) -> Pipeline:
    """The whole reading; `fleets` narrows the per-fleet part (the admin's grants)."""
    from django_q.status import Stat

    fleets = Fleet.objects.all() if fleets is None else fleets
    return Pipeline(
        fleets=[for_fleet(f, spool_dir=spool_dir) for f in fleets.order_by("slug")],
        quarantined=quarantined_files(spool_dir),
        waiting=waiting_files(spool_dir),
        clusters=[f"{c.cluster_id} {c.status}" for c in Stat.get_all()],
        checked_at=timezone.now(),
    )


def age(moment: datetime | None, now: datetime | None = None) -> str:
    """'3m 12s'-style age for people; 'never' for None."""
    if moment is None:
        return "never"
    secs = max(0, int(((now or timezone.now()) - moment).total_seconds()))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m {secs % 60}s"
    if secs < 86400:
        return f"{secs // 3600}h {secs % 3600 // 60}m"
    return f"{secs // 86400}d {secs % 86400 // 3600}h"


# -- reading the files -----------------------------------------------------------------------

def _spool_file(path: Path) -> SpoolFile:
    try:
        st = path.stat()
        lines = _count_lines(path, 0)
    except OSError:
        return SpoolFile(path.name.split(".", 1)[0], str(path), 0, 0, timezone.now())
    return SpoolFile(path.name.split(".", 1)[0], str(path), st.st_size, lines,
                     datetime.fromtimestamp(st.st_mtime, tz=timezone.get_current_timezone()))


def _backlog(path: Path) -> tuple[int, datetime | None]:
    """Complete lines past the drain's cursor, and the `at` of the first of them."""
    try:
        st = path.stat()
    except OSError:
        return 0, None
    cursor = SpoolCursor.objects.filter(device=st.st_dev, inode=st.st_ino).first()
    offset = cursor.offset if cursor and cursor.offset <= st.st_size else 0
    lines = _count_lines(path, offset)
    if not lines:
        return 0, None
    with open(path, "rb") as f:
        f.seek(offset)
        first = f.readline(1 << 20)
    try:
        return lines, contract.parse_time(json.loads(first).get("at"))
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return lines, None


def _count_lines(path: Path, offset: int) -> int:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(READ_LIMIT).count(b"\n")


def _records(path: Path) -> tuple[int, str | None]:
    """How many records an NDJSON file of {reason, …} holds, and the newest one's reason."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return 0, None
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return 0, None
    try:
        reason = str(json.loads(lines[-1]).get("reason") or "")[:300] or None
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        reason = None
    return len(lines), reason


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value
