"""What a test run may leave behind: its test databases, and the embedded server it started."""

from __future__ import annotations

import contextlib


def leftover_test_databases() -> list[str]:
    """This checkout's test database (and its xdist copies) if still on the server.

    Never starts the embedded server to ask: if it is not running, nothing was left there.
    """
    from django.conf import settings

    from ctxlake_site import embedded_db

    db = settings.DATABASES["default"]
    name = db["TEST"]["NAME"]
    try:
        import psycopg

        if db["ENGINE"] == "ctxlake_site.embedded_pg":
            if embedded_db.stopped_on_purpose() or not embedded_db.is_running():
                return []
            params = {"host": str(embedded_db.attach().socket_dir), "user": "postgres"}
        else:
            params = {k: v for k, v in {
                "host": db.get("HOST"), "port": db.get("PORT"), "user": db.get("USER"),
                "password": db.get("PASSWORD"),
            }.items() if v}
        with contextlib.closing(psycopg.connect(dbname="postgres", **params)) as conn:
            rows = conn.execute(
                "SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
                (name, name.replace("_", r"\_") + r"\_gw%"),
            ).fetchall()
    except Exception:  # noqa: BLE001 - a check that cannot connect reports nothing
        return []
    return [row[0] for row in rows]


def embedded_server_running() -> bool | None:
    """Is the embedded server of this $CTXLAKE_HOME running? None when the tests use a
    server named by DATABASE_URL (not ours to start or stop)."""
    import os

    if os.environ.get("DATABASE_URL"):
        return None
    from ctxlake_site import embedded_db

    try:
        return embedded_db.is_running()
    except Exception:  # noqa: BLE001 - no pgserver, no data directory yet: not running
        return False


def stop_embedded_server_we_started(was_running: bool | None) -> bool:
    """Stop the embedded server if this run started it (it was not running before); True
    if it was stopped. It starts again on the next connection: no operator's stop is left
    in force, so `./ctxlake up` or the next test run finds it as a fresh machine would."""
    if was_running is None or was_running or not embedded_server_running():
        return False
    from ctxlake_site import embedded_db

    embedded_db.stop()
    embedded_db.clear_stop_marker()
    return True
