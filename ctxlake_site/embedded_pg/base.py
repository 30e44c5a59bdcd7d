"""A Django database backend: Postgres, started on first connection from the embedded default.

It is Django's own PostgreSQL backend (through ctxlake_site.pooled_pg, whose pool fails
fast while the database is unreachable) with one change: before connecting, it attaches to
the embedded server (starting it if needed) and connects over its unix socket. So the
server starts on first *use* — `manage.py --help` or `check` never starts a database.

With the `pool` option (gunicorn's workers), Django asks for the connection parameters on
every loan and then borrows from the pool, which ignores them. There the attach runs where
a connection is really opened, in the pool's connect arguments (`AttachOnConnect`), and a
loan gets the parameters of the pool's last attach while the pool is healthy — not a new
attach per request, whose lock and file reads were 14 % of a web worker's samples under
load. The parameters stay usable for a connection of one's own (the change feed's).

While an operator's stop is in force (`manage.py embedded_db stop`), connecting raises
the driver's OperationalError — which Django turns into django.db.OperationalError, the
error every caller already handles as "database unavailable" — and starts nothing. The
log noise that follows is folded into one line a minute by embedded_pg.quiet.
"""
from __future__ import annotations

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


class AttachOnConnect:
    """A pool's connect arguments: attached to the embedded server each time the pool opens
    a connection, the last result kept for the loans in between."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.last: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        self.last = attached(self.params)
        return {**self.last, "autocommit": True}


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        params = super().get_connection_params()
        pool = self._connection_pools.get(self.alias) if self.settings_dict["OPTIONS"].get(
            "pool") else None
        if isinstance(pool, base.FailFastPool) and not pool.failing and isinstance(
                pool.kwargs, AttachOnConnect) and pool.kwargs.last:
            return {**pool.kwargs.last}  # the pool's last attach; a loan opens nothing
        return attached(params)

    def pool_connect_params(self) -> AttachOnConnect:
        return AttachOnConnect(super().get_connection_params())
