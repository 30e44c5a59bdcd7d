"""ctxlake_site.pooled_pg: the web's connection pool, its settings and its fail-fast wait.

The pool here is a real psycopg_pool against this test run's Postgres: first pointed at a
directory where no server listens (the database unreachable), then at the real socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest
from django.db import OperationalError, connection, connections

from ctxlake_site import gunicorn_conf
from ctxlake_site.pooled_pg import base as pooled_base
from ctxlake_site.pooled_pg.base import FAILING_WAIT_SECS, RECONNECT_SECS, FailFastPool
from tests.helpers import until

pytestmark = pytest.mark.django_db


@pytest.fixture
def target(tmp_path: Path) -> dict[str, Any]:
    """The pool's connect arguments, read on each attempt: switch `now` to move the server."""
    real = connection.get_connection_params()
    real.pop("cursor_factory", None)
    real.pop("context", None)
    return {"now": {**real, "host": str(tmp_path), "port": 5432}, "real": real}


@pytest.fixture
def pool(target: dict[str, Any]) -> Iterator[FailFastPool]:
    made = FailFastPool(kwargs=lambda: target["now"], min_size=1, max_size=2, timeout=10,
                        reconnect_timeout=RECONNECT_SECS, open=False)
    made.open()
    yield made
    made.close()


def test_an_unreachable_database_is_waited_for_briefly_and_found_again(
    pool: FailFastPool, target: dict[str, Any]
) -> None:
    until(lambda: pool.failing, "the pool's first attempt to fail")
    with pytest.raises(psycopg_pool.PoolTimeout, match=f"after {FAILING_WAIT_SECS:.2f} sec"):
        pool.getconn()  # the wait it chose is in psycopg_pool's own message

    target["now"] = target["real"]  # the database is back

    def served() -> bool:
        try:
            conn = pool.getconn()
        except psycopg_pool.PoolTimeout:
            return False
        assert conn.execute("SELECT 1").fetchone() == (1,)
        pool.putconn(conn)
        return True

    until(served, "the pool to reconnect")
    assert not pool.failing  # the normal wait again


def test_settings_pool_the_web_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """gunicorn's config sets CTXLAKE_DB_POOL for its workers; settings turn it into Django's
    `pool` option, without persistent connections and with a check before each loan."""
    from ctxlake_site import settings

    assert gunicorn_conf.raw_env == [f"CTXLAKE_DB_POOL={gunicorn_conf.rest_threads}"]
    assert gunicorn_conf.threads == gunicorn_conf.rest_threads + gunicorn_conf.longpoll_threads
    monkeypatch.setattr(settings, "CTXLAKE_DB_POOL", 16)
    pooled = settings._pooled({"ENGINE": "ctxlake_site.pooled_pg", "CONN_MAX_AGE": 60})
    assert pooled["OPTIONS"] == {"pool": {"min_size": 1, "max_size": 16,
                                          "timeout": settings.DB_POOL_WAIT_SECS}}
    assert pooled["CONN_MAX_AGE"] == 0 and pooled["CONN_HEALTH_CHECKS"] is True
    monkeypatch.setattr(settings, "CTXLAKE_DB_POOL", 0)
    assert "OPTIONS" not in settings._pooled({"ENGINE": "ctxlake_site.pooled_pg"})


@pytest.fixture
def embedded_pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[int]]]:
    """A second wrapper on the test database, with Django's `pool` option, as a gunicorn
    worker's; and the list that grows by one on each attach to the embedded server."""
    from ctxlake_site import embedded_db
    from ctxlake_site.embedded_pg import base as embedded

    if not isinstance(connections["default"], embedded.DatabaseWrapper):
        pytest.skip("this run's database is DATABASE_URL's, not the embedded server")
    attaches: list[int] = []
    real_attach = embedded_db.attach
    monkeypatch.setattr(embedded_db, "attach",
                        lambda *args: attaches.append(1) or real_attach(*args))
    options = {**connection.settings_dict["OPTIONS"],
               "pool": {"min_size": 1, "max_size": 2, "timeout": 2}}
    # Its alias is "default", as the test's own connection's: the test allows that alias, and
    # django.contrib.postgres looks each new connection's type OIDs up by it. The pools are
    # kept by alias, and the test's own connection has no `pool` option, so it never uses this.
    pooled = embedded.DatabaseWrapper({**connection.settings_dict, "OPTIONS": options,
                                       "CONN_MAX_AGE": 0}, alias="default")
    yield pooled, attaches
    pooled.close()
    pooled.close_pool()


def test_the_embedded_backend_attaches_when_the_pool_connects_not_on_every_loan(
    embedded_pool: tuple[Any, list[int]],
) -> None:
    """Django asks for connection parameters on every loan; attaching each time (a lock and
    file reads) cost a web worker 14 % of its samples under load."""
    pooled, attaches = embedded_pool
    for _ in range(20):  # a request borrows on its first query and gives back at its end
        with pooled.cursor() as cur:
            cur.execute("SELECT 1")
        pooled.close()
    stats = pooled.pool.get_stats()
    opened = stats["connections_num"] - stats.get("connections_errors", 0)
    assert 1 <= len(attaches) <= opened + 1 < 20  # +1: the first loan's, before the pool
    # and the parameters a loan is given still connect (the change feed opens its own)
    params = {k: v for k, v in pooled.get_connection_params().items()
              if k not in ("cursor_factory", "context", "prepare_threshold")}
    with psycopg.connect(**params, autocommit=True) as own:
        assert own.execute("SELECT 1").fetchone() == (1,)
    assert len(attaches) <= opened + 1


def test_a_pooled_embedded_backend_opens_nothing_while_stopped_on_purpose(
    embedded_pool: tuple[Any, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctxlake_site import embedded_db

    pooled, attaches = embedded_pool
    monkeypatch.setattr(embedded_db, "stopped_on_purpose", lambda *args: "by a test")
    with pytest.raises(OperationalError):
        pooled.cursor()
    assert attaches
    assert pooled.pool.get_stats().get("pool_available", 0) == 0  # none opened


def test_a_connection_back_a_moment_ago_is_lent_unchecked_an_idle_or_dead_one_is_not(
    target: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before a loan is skipped for a connection given back less than
    CHECK_IDLE_SECS ago; one idle longer is checked, and a dead one is replaced. A dead
    one lent unchecked fails its query, and the pool drops it when it comes back."""
    checks: list[int] = []
    real_check = psycopg_pool.ConnectionPool.check_connection
    monkeypatch.setattr(psycopg_pool.ConnectionPool, "check_connection",
                        staticmethod(lambda conn: checks.append(1) or real_check(conn)))
    pool = FailFastPool(kwargs=target["real"], min_size=1, max_size=1, timeout=10,
                        check=pooled_base.check_when_idle, open=True)
    try:
        def loan() -> int:
            conn = pool.getconn()
            try:
                return conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            finally:
                pool.putconn(conn)

        first = loan()
        assert len(checks) == 1  # never lent before: checked
        assert loan() == first and len(checks) == 1  # back a moment ago: not checked

        with connection.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s, 5000)", [first])  # waits till gone
        conn = pool.getconn()  # back a moment ago: lent unchecked, and dead
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        pool.putconn(conn)  # dropped; the pool opens another
        second = loan()
        assert second != first

        with connection.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s, 5000)", [second])
        monkeypatch.setattr(pooled_base, "CHECK_IDLE_SECS", 0.0)  # as if idle a while
        checked = len(checks)
        assert loan() not in (first, second)  # the check found it dead: a live one instead
        assert len(checks) > checked
    finally:
        pool.close()
