"""The ORM broker woken by NOTIFY (ctxlake_site.task_broker), against the real Postgres.

Transactional: a notice is delivered at COMMIT, and the pusher's connection is its own.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection
from django_q.brokers import get_broker
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from ctxlake_site import task_broker
from fleet import pg_listen

pytestmark = pytest.mark.django_db(transaction=True)


def _payload(n: int) -> str:
    return str(SignedPackage.dumps({"id": f"t{n}", "name": f"task {n}", "func": "math.floor"}))


def _in_thread(call: Any) -> threading.Thread:
    """Run `call` on a thread of its own (its own Django connection, closed after)."""

    def run() -> None:
        try:
            call()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_the_cluster_uses_it_with_the_orm_broker() -> None:
    assert isinstance(get_broker(), task_broker.ListeningORM)
    assert task_broker.announces_tasks()


def test_an_idle_dequeue_is_woken_by_an_enqueue(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing queued, dequeue waits for a notice, not a poll: with a 600 s idle look,
    only the enqueue's notice can end the wait; the next dequeue returns the task."""
    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 600.0)
    broker = task_broker.ListeningORM(list_key="ctxlake")
    got: list[Any] = []
    waiter = _in_thread(lambda: got.append(broker.dequeue()))
    # the waiter is listening before it looks, so an enqueue at any moment from here on
    # either is found by its look or wakes it
    task_broker.ListeningORM(list_key="ctxlake").enqueue(_payload(1))
    waiter.join(timeout=120)
    assert not waiter.is_alive(), "the enqueue's notice did not wake the waiting dequeue"
    claimed = got[0] or broker.dequeue()
    assert claimed is not None and len(claimed) == 1
    assert SignedPackage.loads(claimed[0][1])["id"] == "t1"


def test_a_task_queued_without_a_notice_is_found_by_the_idle_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row no notice announced (a lapsed lock, another broker class) is still found: the
    pusher looks every IDLE_LOOK_SECS."""
    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 0.2)
    broker = task_broker.ListeningORM(list_key="ctxlake")
    assert broker.dequeue() is None  # opens the listener; nothing queued, nothing heard
    OrmQ.objects.create(key="ctxlake", payload=_payload(2), lock="2000-01-01T00:00:00Z")
    claimed = None
    for _ in range(50):
        claimed = broker.dequeue()
        if claimed:
            break
    assert claimed is not None and SignedPackage.loads(claimed[0][1])["id"] == "t2"
    assert broker.dequeue() is None  # claimed: locked until the retry time


def test_without_listen_it_polls_and_listens_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No LISTEN connection: dequeue polls as django-q2's broker does, and tries to listen
    again once IDLE_LOOK_SECS have passed."""
    attempts: list[str] = []

    def refuse(name: str, channel: str) -> psycopg.Connection[Any]:
        attempts.append(channel)
        raise psycopg.OperationalError("no LISTEN here")

    monkeypatch.setattr(pg_listen, "listen_connection", refuse)
    broker = task_broker.ListeningORM(list_key="ctxlake")
    assert broker.dequeue() is None
    assert broker.dequeue() is None
    assert attempts == [task_broker.CHANNEL]  # not retried before IDLE_LOOK_SECS
    broker.enqueue(_payload(3))
    claimed = broker.dequeue()
    assert claimed is not None and SignedPackage.loads(claimed[0][1])["id"] == "t3"
    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 0.0)
    broker._retry_at = 0.0
    assert broker.dequeue() is None
    assert len(attempts) == 2


def test_a_lost_listen_connection_falls_back_to_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 0.1)
    broker = task_broker.ListeningORM(list_key="ctxlake")
    assert broker.dequeue() is None
    listener = broker._listener
    assert listener is not None
    with connection.cursor() as cur:  # Postgres ends the pusher's LISTEN connection
        cur.execute("SELECT pg_terminate_backend(%s)", [listener.info.backend_pid])
    for _ in range(3):  # the first wait may only read Postgres' farewell; the next fails
        assert broker.dequeue() is None
        if broker._listener is None:
            break
    assert broker._listener is None and listener.closed
    broker.enqueue(_payload(4))
    claimed = broker.dequeue()
    assert claimed is not None and SignedPackage.loads(claimed[0][1])["id"] == "t4"


def test_a_forked_process_opens_its_own_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sentinel forks the pusher: a listener opened before a fork belongs to the parent
    (one socket shared by two processes would split the notices), so the child opens its
    own and leaves the parent's open."""
    import os

    broker = task_broker.ListeningORM(list_key="ctxlake")
    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 0.1)
    assert broker.dequeue() is None
    parents = broker._listener
    assert parents is not None
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert broker.dequeue() is None
    assert broker._listener is not None and broker._listener is not parents
    assert not parents.closed
    parents.close()
    broker._drop()


def test_follower_notices_are_off_without_the_listening_broker(settings: Any) -> None:
    settings.Q_CLUSTER = {k: v for k, v in settings.Q_CLUSTER.items() if k != "broker_class"}
    assert not task_broker.announces_tasks()
    with task_broker.queued_tasks() as queued:
        assert queued.wait(600) is True  # at once: the caller looks as often as it waits


def test_after_an_empty_look_the_next_comes_a_poll_later_at_the_soonest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woken by a notice right after finding the queue empty, dequeue still waits out the
    rest of a poll before the next look, as django-q2's broker does: tasks a stream of
    writes queues meanwhile (a proposal's embedding) are then one pass, not one each."""
    import time

    from django_q.brokers import orm
    from django_q.conf import Conf

    monkeypatch.setattr(task_broker, "IDLE_LOOK_SECS", 600.0)
    broker = task_broker.ListeningORM(list_key="ctxlake")
    real_sleep = orm.sleep

    def enqueue_then_sleep(secs: float) -> None:
        # a task queued just after the empty look: its notice comes at once
        task_broker.ListeningORM(list_key="ctxlake").enqueue(_payload(5))
        real_sleep(secs)

    monkeypatch.setattr(orm, "sleep", enqueue_then_sleep)
    began = time.monotonic()
    assert broker.dequeue() is None
    assert time.monotonic() - began >= Conf.POLL  # a lower bound: holds on a busy machine
    monkeypatch.setattr(orm, "sleep", real_sleep)
    claimed = broker.dequeue()
    assert claimed is not None and SignedPackage.loads(claimed[0][1])["id"] == "t5"
