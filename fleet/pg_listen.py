"""Connections that LISTEN, and waiting on them without waking up ten times a second.

psycopg's own `Connection.notifies(timeout=…)` waits in slices of 0.1 s (so that Ctrl-C
is noticed): a process parked on it wakes ten times a second. Measured on this project's
2-core machine, each timed wake-up of an idle process costs a few milliseconds of CPU, so
the change feed's listener in every web process and the task broker's pusher wait here
instead, in one select() on the connection's socket.
"""

from __future__ import annotations

import select

import psycopg
from django.db import connections


def listen_connection(name: str, channel: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection of our own to the same database as Django's (the test one in tests), in
    autocommit, listening on `channel`; `name` is its application in pg_stat_activity."""
    params = connections["default"].get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    params["application_name"] = name
    conn = psycopg.connect(**params, autocommit=True)
    try:
        conn.execute(f"LISTEN {channel}")
    except BaseException:
        conn.close()
        raise
    return conn


def notices(conn: psycopg.Connection[tuple[object, ...]], timeout: float) -> list[psycopg.Notify]:
    """The notices that reach `conn` within `timeout` seconds: every one there is once the
    first arrives, or [] at the timeout. A connection Postgres ended raises psycopg.Error,
    at the latest on the next call (the first may only read its farewell)."""
    ready, _, _ = select.select([conn.fileno()], [], [], timeout)
    if not ready:
        return []
    return list(conn.notifies(timeout=0))
