"""A Django database backend: Django's PostgreSQL one, whose connection pool fails fast.

Django's `pool` option (psycopg_pool) makes a request wait up to the pool's `timeout` for a
connection. That is right while every connection is busy, and wrong while the database is
unreachable: each request would wait the whole timeout before its 503. `FailFastPool`
tells the two apart by the pool's own last attempt to connect: after one failed, a request
waits at most `FAILING_WAIT_SECS`; the pool's attempts go on (a lost connection is retried
for `RECONNECT_SECS`, and each request that finds none asks for another), and the first
that succeeds restores the normal wait.

The pool checks a connection before lending it (CONN_HEALTH_CHECKS), so that a request after
a database restart gets a live one; but not one given back less than CHECK_IDLE_SECS ago.
The check is a round trip per request, and under fleet_scale.py's load it was 8 % of the
web workers' busy samples (py-spy, 2026-12-05) for connections that had served a request
a few milliseconds before. A connection that broke in that moment fails its query, the
request is answered 503 (ctxlake_site.middleware), and psycopg_pool drops the connection
when it comes back broken.

Where parameters are bound on the server (settings.CTXLAKE_DB_PREPARE), its cursor sends
the few statements that binding cannot carry as Django's default binding would
(ctxlake_site.pooled_pg.binding). Without either option this backend is Django's, unchanged.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

from ctxlake_site.pooled_pg.binding import BindingCursor

#: The longest a request waits for a connection while the pool cannot connect.
FAILING_WAIT_SECS = 0.5
#: How long the pool retries a lost connection (backing off from 1 s) before it gives the
#: slot up, so that the next request asks for a fresh attempt. psycopg_pool's default, five
#: minutes of doubling delays, could leave a recovered database unused for a minute.
RECONNECT_SECS = 2.0
#: A connection given back more recently than this is lent again without a check.
CHECK_IDLE_SECS = 1.0


class FailFastPool(ConnectionPool):
    failing = False  # the last attempt to open a connection failed

    def _connect(self, timeout: float | None = None) -> Any:
        try:
            conn = super()._connect(timeout)
        except Exception:
            self.failing = True
            raise
        self.failing = False
        return conn

    def getconn(self, timeout: float | None = None) -> Any:
        if self.failing:
            timeout = min(timeout if timeout is not None else self.timeout, FAILING_WAIT_SECS)
        return super().getconn(timeout)

    def putconn(self, conn: Any) -> None:
        conn._ctxlake_returned_at = time.monotonic()
        super().putconn(conn)


def check_when_idle(conn: Any) -> None:
    """psycopg_pool's check (one round trip), for a connection idle CHECK_IDLE_SECS or more
    or never lent; raises as that check does when the connection is dead."""
    returned = getattr(conn, "_ctxlake_returned_at", None)
    if returned is not None and time.monotonic() - returned < CHECK_IDLE_SECS:
        return
    ConnectionPool.check_connection(conn)


class DatabaseWrapper(base.DatabaseWrapper):
    # Django's, missing from its type stubs (annotations only: the values are Django's)
    _connection_pools: dict[str, ConnectionPool]
    _configure_connection: Callable[[Any], None]

    @property
    def pool(self) -> FailFastPool | None:
        """Django's pool property (django/db/backends/postgresql/base.py), with this module's
        pool class: the options, the connect arguments and the sharing are Django's."""
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        if self.alias not in self._connection_pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            kwargs = self.pool_connect_params()
            checks = self.settings_dict["CONN_HEALTH_CHECKS"]
            pool = FailFastPool(
                kwargs=kwargs,
                open=False,
                configure=self._configure_connection,
                check=check_when_idle if checks else None,
                **{"reconnect_timeout": RECONNECT_SECS, **({} if options is True else options)},
            )
            self._connection_pools.setdefault(self.alias, pool)
        shared = self._connection_pools[self.alias]
        assert isinstance(shared, FailFastPool)
        return shared

    def get_connection_params(self) -> dict[str, Any]:
        """Django's, with `BindingCursor` where parameters are bound on the server (see
        ctxlake_site.pooled_pg.binding)."""
        params = super().get_connection_params()
        if self.settings_dict["OPTIONS"].get("server_side_binding") is True:
            params["cursor_factory"] = BindingCursor
        return params

    def pool_connect_params(self) -> dict[str, Any] | Callable[[], dict[str, Any]]:
        """The pool's connect arguments: Django's (the settings' parameters, autocommit), or a
        callable psycopg_pool runs each time it opens a connection, for a subclass whose
        parameters need work that should not run on every loan (embedded_pg)."""
        return {**self.get_connection_params(), "autocommit": True}
