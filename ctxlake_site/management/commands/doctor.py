"""`manage.py doctor`: is this ctxlake installation able to work? A table, non-zero on failure."""

from __future__ import annotations

import json
import tempfile
from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from claims.pgvector_check import pgvector_version
from ctxlake_site import db_health, embedded_db, paths


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str


def _database() -> Check:
    engine = settings.DATABASES["default"]["ENGINE"]
    where = "DATABASE_URL" if engine != "ctxlake_site.embedded_pg" else "embedded"
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


CHECKS: list[tuple[str, Callable[[], Check]]] = [
    ("database", _database),
    ("pgvector", _pgvector),
    ("migrations", _migrations),
    ("cache dir", lambda: _writable("cache dir", paths.cache_dir())),
    ("spool dir", lambda: _writable("spool dir", paths.spool_dir() / "mcp")),
    ("worker", _worker),
    ("index bloat", lambda: Check("index bloat", *db_health.doctor_status())),
]
NEEDS_DATABASE = {"database", "pgvector", "migrations", "worker"}


class Command(BaseCommand):
    help = "Check the database, pgvector, migrations, cache/spool directories and workers."

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
                results.append(Check(name, "fail", "skipped: database unreachable"))
                continue
            try:
                results.append(check())
            except Exception as exc:  # a doctor reports every failure, it does not crash
                results.append(Check(name, "fail", f"{type(exc).__name__}: {exc}".strip()))
                db_down = db_down or name == "database"
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
    return json.dumps([r.__dict__ for r in results])
