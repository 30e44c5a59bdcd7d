"""The production web config (`ctxlake_site/gunicorn_conf.py`) under a host fleet's long-polls.

A real gunicorn with that config, one worker process: more hosts park a long-poll than
the old cap of half of 16 threads allowed, REST keeps answering beside them, the process
opens no more Postgres connections than its pool holds (parked threads hold none), and one
render wakes every parked host.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

from ctxlake_site import gunicorn_conf, workers
from fleet import change_feed, tokens
from fleet.models import Fleet
from tests.helpers import database_url_for_test_database, env_for_test_database, until
from tests.site.test_redis_cluster import _free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
HOSTS = 40  # each parks one long-poll: five times the old cap of 8 per process
REST = 120  # requests, 40 at a time, while the hosts wait


def _get(url: str, secret: str, timeout: float = 60) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _web_connections() -> int:
    """Connections to this test database other than this test's own and the web process's
    change-feed listener."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND application_name <> 'ctxlake-change-feed'"
        )
        return int(cur.fetchone()[0])


@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = env_for_test_database(CTXLAKE_HOME=str(tmp_path), CTXLAKE_API_RATE_PER_MINUTE="100000",
                                SECRET_KEY="web-threads-" + "x" * 40)
    env.pop("CTXLAKE_DB_POOL", None)  # the config's own default
    env.pop("CTXLAKE_DB_NAME", None)  # this test's database on the shared server, as a host
    env["DATABASE_URL"] = database_url_for_test_database()  # with a home of its own sees it
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", "--bind",
             f"127.0.0.1:{port}", "--config", "python:ctxlake_site.gunicorn_conf",
             "--workers", "1"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return _get(f"{url}/api/v1/health", "-", timeout=2)[0] == 401  # it answers
            except OSError:
                return False

        until(up, "gunicorn up")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert b"Traceback" not in log.read_bytes(), log.read_text(errors="replace")[-3000:]


def test_hosts_long_poll_beyond_the_old_cap_rest_answers_and_connections_stay_pooled(
    web: str,
) -> None:
    assert gunicorn_conf.longpoll_threads >= HOSTS and gunicorn_conf.rest_threads < HOSTS
    fleet = Fleet.objects.create(slug="threads", name="threads", memory_mode="live")
    workers.render_fleet(fleet)
    operator = tokens.issue_token(fleet, role="operator", name="ops").secret
    hosts = [tokens.issue_token(fleet, role="host", name=f"host-{i}").secret
             for i in range(HOSTS)]
    base = f"{web}/api/v1/fleets/{fleet.slug}"
    status, body = _get(f"{base}/changes", hosts[0])
    assert status == 200, body
    version = json.loads(body)["version"]

    with ThreadPoolExecutor(HOSTS + 40) as pool:
        waits = [pool.submit(_get, f"{base}/changes?after={version}&wait=30", h)
                 for h in hosts]
        rest = list(pool.map(lambda _: _get(f"{base}/status", operator)[0], range(REST)))
        assert rest == [200] * REST
        # none was refused (429 comes at once) nor answered: every host still waits
        assert not any(w.done() for w in waits), [w.result() for w in waits if w.done()]
        assert _web_connections() <= gunicorn_conf.rest_threads
        workers.render_fleet(fleet)  # one render: every parked host is told
        answers = [w.result() for w in waits]
    assert {status for status, _ in answers} == {200}, answers[:3]
    assert {json.loads(body)["version"] for _, body in answers} == {
        change_feed.current_version(fleet.slug)}
