"""A Django database backend: Postgres, started on first connection from the embedded default.

It is Django's own PostgreSQL backend (through ctxlake_site.pooled_pg, whose pool fails
fast while the database is unreachable) with one change: before connecting, it attaches to
the embedded server (starting it if needed) and connects over its unix socket. So the
server starts on first *use* — `manage.py --help` or `check` never starts a database.

With the `pool` option (gunicorn's workers), Django asks for the connection parameters on
every loan and then borrows from the pool, which ignores them; so the attach runs where a
connection is really opened, in the pool's connect arguments, and not once per request
(where its lock and file reads were 14 % of a web worker's samples under load).

While an operator's stop is in force (`manage.py embedded_db stop`), connecting raises
the driver's OperationalError — which Django turns into django.db.OperationalError, the
error every caller already handles as "database unavailable" — and starts nothing. The
log noise that follows is folded into one line a minute by embedded_pg.quiet.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from ctxlake_site import embedded_db
from ctxlake_site.pooled_pg import base

_ready: set[str] = set()  # databases this process has already made sure exist


def attached(params: dict[str, Any]) -> dict[str, Any]:
    """`params` pointed at the embedded server's socket, the server started if it is down;
    raises the driver's OperationalError while an operator's stop is in force."""
    try:
        server = embedded_db.attach()
    except embedded_db.DatabaseStopped as exc:
        raise psycopg.OperationalError(str(exc)) from None
    params = {**params, "host": str(server.socket_dir)}
    params.pop("port", None)
    name = params.get("dbname", "postgres")
    if name not in _ready:
        embedded_db.ensure_database(server, name)
        _ready.add(name)
    return params


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        if self.settings_dict["OPTIONS"].get("pool"):
            return params  # the pool attaches when it opens a connection (pool_connect_params)
        return attached(params)

    def pool_connect_params(self) -> Callable[[], dict[str, Any]]:
        params = {**super().get_connection_params(), "autocommit": True}
        return lambda: attached(params)
