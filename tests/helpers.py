"""Small helpers shared by tests that run real subprocesses or threads against the test
database."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from urllib.parse import quote

from django.db import connection

#: How long a test lets a step that should end run before failing it as hung: a guard,
#: never a speed bound (a 300 s one cut off a sub-suite that took 298 s alone on an idle
#: 2-core VM; the suite must pass on a busy machine, and speed is measured in bench/).
HANG_GUARD_SECS = 1800


def ctxlake_script() -> ModuleType:
    """The ./ctxlake script as a module (it has no .py name to import it by)."""
    path = Path(__file__).resolve().parents[1] / "ctxlake"
    loader = importlib.machinery.SourceFileLoader("ctxlake_script", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclasses look their module up there
    try:
        loader.exec_module(script)
    finally:
        del sys.modules[spec.name]
    return script


def bench_module(name: str, as_name: str | None = None) -> ModuleType:
    """bench/<name>.py as a module (bench/ is not a package), registered as `as_name`
    (default `name`): its dataclasses look their module up by that name."""
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(as_name or name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def env_for_test_database(**extra: str) -> dict[str, str]:
    """Environment for a `manage.py` subprocess that must use *this* test run's database."""
    s = connection.settings_dict
    env = {**os.environ, **extra}
    if s["ENGINE"] == "ctxlake_site.embedded_pg":
        env["CTXLAKE_DB_NAME"] = s["NAME"]
        env.pop("DATABASE_URL", None)
    else:
        env["DATABASE_URL"] = database_url_for_test_database()
    return env


def database_url_for_test_database() -> str:
    """A DATABASE_URL naming this test run's database, the embedded server's too (over its
    Unix socket): how a process with a CTXLAKE_HOME of its own shares the database, as
    another host shares a managed Postgres."""
    s = connection.settings_dict
    if s["ENGINE"] == "ctxlake_site.embedded_pg":
        from ctxlake_site import embedded_db

        host, port, auth = str(embedded_db.attach().socket_dir), "", "postgres"
    else:
        host = s.get("HOST") or s.get("OPTIONS", {}).get("host", "")
        port = f":{s['PORT']}" if s.get("PORT") else ""
        auth = quote(s.get("USER") or "", safe="")
        if s.get("PASSWORD"):
            auth += ":" + quote(s["PASSWORD"], safe="")
    return f"postgres://{auth}@{quote(host, safe='')}{port}/{s['NAME']}"


def vacuum(table: str) -> None:
    """VACUUM `table` from a connection of its own (VACUUM cannot run inside the test's
    transaction): it drops what earlier tests' rolled-back rows left in its indexes, and
    autovacuum then has nothing to do on it while the test runs."""
    import psycopg

    with psycopg.connect(database_url_for_test_database(), autocommit=True) as conn:
        conn.execute(f'VACUUM "{table}"')


def until_an_advisory_lock_is_awaited(who: str, deadline_secs: float = 120) -> None:
    """Until some other session waits for an advisory lock (`who`, named in the failure):
    how a test knows a second render or a collector queued behind the lock it holds. Only
    this database's waits count: another test worker's share the server."""
    deadline = time.monotonic() + deadline_secs
    while True:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND NOT granted AND database = (SELECT oid FROM pg_database "
                        "WHERE datname = current_database())")
            if cur.fetchone()[0]:
                return
        assert time.monotonic() < deadline, f"{who} never waited for the advisory lock"
        time.sleep(0.01)


def until(check: Callable[[], object], what: str, secs: float = 60, poll: float = 0.05) -> None:
    """Wait for an event the test expects (never a fixed sleep); fail naming `what` after
    `secs`."""
    deadline = time.monotonic() + secs
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(poll)
