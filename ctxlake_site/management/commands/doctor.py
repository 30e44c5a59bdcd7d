"""`manage.py doctor`: is this ctxlake installation working? A table, non-zero on failure.

Besides "can it work" (database, pgvector, migrations, directories, workers) it tells the
truth about the pipeline: per fleet, the spool backlog, dead letters, lines a server
refused, the cache's age against the last change, the last drain; and the spool files of
fleets that do not exist (quarantined or waiting). The reading is
ctxlake_site.pipeline_status, the same the admin index and GET /api/v1/health show.
`--json` prints the same checks as a list; docs/doctor.md documents every field.
"""

from __future__ import annotations

import json
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from claims.models import ClaimEvent
from claims.pgvector_check import pgvector_version
from ctxlake_site import db_health, embedded_db, paths, pipeline_status
from fleet import rendering, retention
from fleet.models import Activity, AppliedEvent, DeadLetter, Session


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    data: dict[str, Any] | None = None  # the numbers behind the detail (pipeline checks)


def _database() -> Check:
    """Reachable, and where. Never starts the embedded server: a doctor that revived a
    stopped database would report OK for an installation that was down."""
    engine = settings.DATABASES["default"]["ENGINE"]
    where = "DATABASE_URL" if engine != "ctxlake_site.embedded_pg" else "embedded"
    if where == "embedded":
        why = embedded_db.stopped_on_purpose()
        if why is not None:
            return Check("database", "fail", embedded_db.stopped_message(why))
        if not embedded_db.is_running():
            return Check("database", "fail", f"embedded Postgres is not running (data "
                         f"{paths.pg_data_dir()}); `manage.py embedded_db start` or "
                         "`./ctxlake up` starts it")
    connection.ensure_connection()
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        version = cur.fetchone()[0]
    if where == "embedded":
        server = embedded_db.attach()
        where = f"embedded, data {server.data_dir}, socket {server.socket_dir}, pid {server.pid}"
    return Check("database", "ok", f"PostgreSQL {version} ({where})")


def _pgvector() -> Check:
    installed, available = pgvector_version(connection)
    if installed:
        return Check("pgvector", "ok", f"vector {installed} installed")
    if available:
        return Check("pgvector", "fail", f"vector {available} available but not installed: migrate")
    return Check("pgvector", "fail", "extension 'vector' not available on this server")


def _migrations() -> Check:
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        return Check("migrations", "fail", f"{len(pending)} unapplied: run manage.py migrate")
    return Check("migrations", "ok", "all applied")


def _writable(name: str, directory: Path) -> Check:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(name, "fail", f"{directory}: {exc.strerror or exc}")
    return Check(name, "ok", f"{directory} writable")


def _worker() -> Check:
    from django_q.status import Stat

    clusters = Stat.get_all()
    if not clusters:
        return Check("worker", "warn", "no django-q2 cluster heartbeat: start manage.py qcluster")
    states = ", ".join(f"{c.cluster_id} {c.status}" for c in clusters)
    return Check("worker", "ok", f"{len(clusters)} cluster(s): {states}")


def _broker() -> Check:
    """Renders this process requests must reach the workers: the same broker on both."""
    mismatch = rendering.broker_mismatch()
    if mismatch:
        return Check("broker", "warn", mismatch)
    return Check("broker", "ok", f"{rendering.broker()} (the workers read the same, or have "
                 "not said yet)")


#: The tables `retention` sizes: what retention prunes, and the audit it never touches.
RETAINED = (("activity", Activity), ("applied_events", AppliedEvent),
            ("dead_letters", DeadLetter), ("session_transcripts", Session),
            ("claim_events", ClaimEvent))
BACKLOG_WARN_SECS = 300  # the drain polls every 2 s: a line older than this is stuck


def _pipeline() -> list[Check]:
    """One check per fleet, then one for spool files of fleets that do not exist."""
    reading = pipeline_status.overview()
    now = reading.checked_at
    checks = [_fleet_check(f, now) for f in reading.fleets]
    if not checks:
        checks.append(Check("pipeline", "ok", "no fleets yet: manage.py create_fleet SLUG"))
    stray = [*reading.quarantined, *reading.waiting]
    if stray:
        names = ", ".join(f"{Path(f.path).name} ({f.lines} lines)" for f in stray[:5])
        more = f" and {len(stray) - 5} more" if len(stray) > 5 else ""
        detail = (f"{len(reading.quarantined)} quarantined, {len(reading.waiting)} waiting: "
                  f"{names}{more}: writes for fleets that do not exist; create the fleet "
                  "(manage.py create_fleet SLUG) or fix the agent's CTXLAKE_FLEET_ID")
        status = "warn"
    else:
        detail, status = "no spool files of unknown fleets", "ok"
    data = {"quarantined": [asdict(f) for f in reading.quarantined],
            "waiting": [asdict(f) for f in reading.waiting]}
    checks.append(Check("unknown fleets", status, detail, _json_ready(data)))
    return checks


def _pipeline_from_files() -> Check:
    """With the database down, the pipeline as the spool files show it: the lines agents
    wrote that cannot be applied until it is back (never "skipped": they are the news)."""
    files = pipeline_status.spool_files()
    lines = sum(f.lines for f in files)
    per_fleet: dict[str, int] = {}
    for f in files:
        per_fleet[f.fleet] = per_fleet.get(f.fleet, 0) + f.lines
    shown = ", ".join(f"{fleet} {n}" for fleet, n in sorted(per_fleet.items())[:10])
    more = f" and {len(per_fleet) - 10} more fleet(s)" if len(per_fleet) > 10 else ""
    detail = (f"database unreachable; {lines} line(s) in {len(files)} spool file(s) wait "
              f"to be applied ({shown}{more}; the drain's position is in the database, so "
              "lines it applied before may be among them)" if files else
              "database unreachable; no spool files waiting")
    return Check("pipeline", "fail", detail,
                 _json_ready({"spool_lines": lines, "files": [asdict(f) for f in files]}))


def _fleet_check(f: pipeline_status.FleetPipeline, now: Any) -> Check:
    age = pipeline_status.age
    parts = [f"backlog {f.backlog_lines} line(s)"
             + (f" ({f.inbox_lines} in the inbox)" if f.inbox_lines else "")
             + (f", oldest {age(f.backlog_oldest, now)}" if f.backlog_lines else "")]
    parts.append(f"dead letters {f.dead_letters}"
                 + (f" (newest: {f.dead_newest_reason})" if f.dead_newest_reason else ""))
    if f.rejected:
        parts.append(f"rejected by server {f.rejected} (newest: {f.rejected_newest_reason})")
    parts.append(f"cache rendered {age(f.rendered_at, now)} ago" if f.rendered_at
                 else "cache never rendered")
    parts.append(f"last change {age(f.last_activity, now)} ago" if f.last_activity
                 else "no change recorded")
    if f.render_queued:
        parts.append("render queued")
    parts.append(f"last drain {age(f.last_drain, now)} ago" if f.last_drain else "never drained")
    stuck = (f.backlog_oldest is not None
             and (now - f.backlog_oldest).total_seconds() > BACKLOG_WARN_SECS)
    status = "warn" if f.problems or stuck else "ok"
    if stuck:
        parts.insert(0, "drain behind")
    parts[:0] = f.problems
    data = asdict(f)
    data["cache_behind"] = f.cache_behind
    return Check(f"fleet {f.fleet}", status, "; ".join(parts), _json_ready(data))


def _retention() -> Check:
    """Table sizes of what retention prunes (and of the claim events it never prunes), and
    what the next `maintain_db --commit` would remove, per kind over every fleet."""
    tables = {model._meta.db_table: kind for kind, model in RETAINED}
    sizes = db_health.table_sizes(list(tables))
    due: dict[str, dict[str, int]] = {}
    for p in retention.next_prune():
        if p.matched:
            due.setdefault(p.fleet, {})[p.kind] = p.matched
    totals = {kind: sum(d.get(kind, 0) for d in due.values()) for kind in retention.KIND.values()}
    shown = "; ".join(
        f"{table} {db_health.mb(size)}"
        + (f" ~{rows:,} rows" if rows is not None else "")
        + (" (never pruned: the audit)" if tables[table] == "claim_events" else "")
        for table, (size, rows) in sorted(sizes.items()))
    removes = ", ".join(f"{n:,} {kind.replace('_', ' ')}" for kind, n in totals.items() if n)
    detail = (f"next prune removes {removes}" if removes else "next prune removes nothing")
    data = {"tables": {t: {"bytes": b, "rows_estimate": r} for t, (b, r) in sizes.items()},
            "next_prune": due}
    return Check("retention", "ok", f"{detail}; {shown}", data)


def _skipped(name: str) -> Callable[[], Check]:
    return lambda: Check(name, "fail", "skipped: database unreachable")


def _json_ready(value: Any) -> Any:
    return pipeline_status.jsonable(value)


CHECKS: list[tuple[str, Callable[[], Check | list[Check]]]] = [
    ("database", _database),
    ("pgvector", _pgvector),
    ("migrations", _migrations),
    ("cache dir", lambda: _writable("cache dir", paths.cache_dir())),
    ("spool dir", lambda: _writable("spool dir", paths.spool_dir() / "mcp")),
    ("worker", _worker),
    ("broker", _broker),
    ("index bloat", lambda: Check("index bloat", *db_health.doctor_status())),
    ("pipeline", _pipeline),
    ("retention", _retention),
]
#: What a check that needs the database says when it is down: the files' side, or "skipped".
WITHOUT_DATABASE: dict[str, Callable[[], Check | list[Check]]] = {
    "pipeline": _pipeline_from_files,
}
NEEDS_DATABASE = {"database", "pgvector", "migrations", "worker", "broker", "index bloat",
                  "pipeline", "retention"}


class Command(BaseCommand):
    help = ("Check the database, pgvector, migrations, cache/spool directories, workers and "
            "the pipeline per fleet (backlog, dead letters, cache age, unknown fleets), and the "
            "table sizes and next prune of retention.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="Print the checks as JSON."
        )

    def handle(self, *args: Any, as_json: bool = False, **options: Any) -> None:
        results = self._run_all()
        if as_json:
            self.stdout.write(_to_json(results))
        else:
            self._print_table(results)
        failed = [r.name for r in results if r.status == "fail"]
        if failed:
            raise CommandError(f"doctor: {len(failed)} check(s) failed: {', '.join(failed)}")

    def _run_all(self) -> list[Check]:
        results: list[Check] = []
        db_down = False
        for name, check in CHECKS:
            if db_down and name in NEEDS_DATABASE:
                check = WITHOUT_DATABASE.get(name, _skipped(name))
            try:
                found = check()
                results.extend(found if isinstance(found, list) else [found])
            except Exception as exc:  # a doctor reports every failure, it does not crash
                results.append(Check(name, "fail", f"{type(exc).__name__}: {exc}".strip()))
            db_down = db_down or (name == "database" and results[-1].status == "fail")
        return results

    def _print_table(self, results: list[Check]) -> None:
        style = {"ok": self.style.SUCCESS, "warn": self.style.WARNING, "fail": self.style.ERROR}
        width = max(len(r.name) for r in results)
        for r in results:
            first_line = r.detail.splitlines()[0] if r.detail else ""
            self.stdout.write(
                f"{r.name:<{width}}  {style[r.status](r.status.upper()):<4}  {first_line}"
            )


def _to_json(results: list[Check]) -> str:
    return json.dumps([{k: v for k, v in asdict(r).items() if v is not None or k != "data"}
                       for r in results])
