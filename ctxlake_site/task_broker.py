"""django-q2's ORM broker, woken by a Postgres NOTIFY instead of looking five times a second.

With the ORM broker (no CTXLAKE_REDIS_URL), django-q2's pusher asks the queue table for a
task every `poll` (0.2 s), whether or not anything was queued. On an idle cluster that loop
was the largest part of the cluster's 13-15 % of a core and of Postgres' 2-3 % (measured on
2 cores; each timed wake-up costs far more than its query). Here `enqueue` also sends a
NOTIFY, which Postgres delivers with the row, at COMMIT; `dequeue`, finding the queue
empty, sleeps its poll as before and then waits on a connection that LISTENs for it
instead of looking again.

A notice is a wake-up, never the only way a task is found. With nothing announced the
pusher still looks every IDLE_LOOK_SECS: a task whose lock lapsed (its worker was killed)
returns to the queue without a notice. Without a listening connection (Postgres
restarting, a transaction-mode pooler that drops LISTEN) it polls as django-q2's own broker
does and tries to LISTEN again every IDLE_LOOK_SECS. Redis needs none of this: its broker
blocks on the list.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from fleet import pg_listen

log = logging.getLogger(__name__)

CHANNEL = "ctxlake_tasks"
#: With nothing announced, the pusher looks at the queue at least this often anyway.
IDLE_LOOK_SECS = 5.0

Claimed = list[tuple[Any, Any]]  # (ack id, signed payload), what the pusher unpacks


class ListeningORM(ORM):  # type: ignore[misc]  # django-q2 ships no types
    """The ORM broker whose pusher waits on NOTIFY (Q_CLUSTER `broker_class`)."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self._listener: psycopg.Connection[Any] | None = None
        self._listener_pid = 0  # the process that opened it: a forked child opens its own
        self._retry_at = 0.0

    def enqueue(self, task: Any) -> Any:
        """Queue the task; listeners hear of it when its row is committed."""
        pk = super().enqueue(task)
        with connections[Conf.ORM].cursor() as cur:
            cur.execute("SELECT pg_notify(%s, '')", [CHANNEL])
        return pk

    def dequeue(self) -> Claimed | None:
        """django-q2's own dequeue (the oldest tasks, claimed; with none, a poll's sleep),
        then, with none, a wait for a notice (IDLE_LOOK_SECS at most). None tells the pusher
        to ask again.

        The poll's sleep stays: the next look comes a poll after an empty one at the
        soonest, so under a stream of writes the proposals of that poll share one embedding
        pass (each marker-debounced task absorbs what is queued before it starts). Woken at
        once instead, the same 2,400 writes ran ~550 embedding passes, not ~75. A notice
        sent during that sleep waits in the socket and ends the wait at once."""
        listener = self._listening()  # LISTEN before looking: no notice falls in between
        tasks: Claimed | None = super().dequeue()
        if tasks or listener is None:
            return tasks
        try:
            pg_listen.notices(listener, timeout=IDLE_LOOK_SECS)
        except psycopg.Error as exc:
            log.warning("task broker: lost its LISTEN connection (%s); polling", exc)
            self._drop()
        return None

    def _listening(self) -> psycopg.Connection[Any] | None:
        """This process's LISTEN connection, opened on first use; None while it cannot be."""
        if self._listener is not None and self._listener_pid == os.getpid():
            return self._listener
        self._listener = None  # a forked parent's: never closed here, it is still theirs
        if time.monotonic() < self._retry_at:
            return None
        try:
            conn = pg_listen.listen_connection("ctxlake-task-broker", CHANNEL)
        except psycopg.Error as exc:
            log.warning("task broker: cannot LISTEN (%s); polling meanwhile", exc)
            self._retry_at = time.monotonic() + IDLE_LOOK_SECS
            return None
        self._listener, self._listener_pid = conn, os.getpid()
        return conn

    def _drop(self) -> None:
        conn, self._listener = self._listener, None
        self._retry_at = time.monotonic() + IDLE_LOOK_SECS
        if conn is not None:
            conn.close()


def announces_tasks() -> bool:
    """Does this process's broker send a notice for every task it queues? (Not Redis's.)"""
    return settings.Q_CLUSTER.get("broker_class") == f"{__name__}.{ListeningORM.__name__}"


class QueuedTasks:
    """What a long task sharing the workers (the drain follower) waits on to learn that a
    task was queued, so that it looks for a task waiting behind it only then."""

    def __init__(self, conn: psycopg.Connection[Any] | None) -> None:
        self._conn = conn

    def wait(self, timeout: float) -> bool:
        """True once a task is queued within `timeout` seconds, False at the timeout. Without
        notices (Redis, or no LISTEN connection): True at once, so the caller looks as often
        as it would without them."""
        if self._conn is None:
            return True
        try:
            return bool(pg_listen.notices(self._conn, timeout))
        except psycopg.Error as exc:
            log.warning("task notices lost (%s); looking without them", exc)
            self._conn = None
            return True


@contextmanager
def queued_tasks() -> Iterator[QueuedTasks]:
    """Listen for queued tasks for the duration of the block (a connection of its own)."""
    conn = None
    if announces_tasks():
        try:
            conn = pg_listen.listen_connection("ctxlake-drain-follower", CHANNEL)
        except psycopg.Error as exc:
            log.warning("task notices: cannot LISTEN (%s); looking without them", exc)
    try:
        yield QueuedTasks(conn)
    finally:
        if conn is not None:
            conn.close()
