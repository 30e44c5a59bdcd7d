"""Which of this checkout's test databases still exist on the server after a run."""

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
