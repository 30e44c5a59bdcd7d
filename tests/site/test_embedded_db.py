"""The embedded Postgres: shared by every process, never stopped by one that only attached."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxlake_site import embedded_db
from tests.site.homes import manage, private_env, private_home, shell

ROOT = Path(__file__).resolve().parents[2]

ATTACH = """
import json, sys
import psycopg
from pathlib import Path
from ctxlake_site import embedded_db
server = embedded_db.attach(Path(sys.argv[1]))
with psycopg.connect(host=str(server.socket_dir), user="postgres", dbname="postgres") as conn:
    backend = conn.execute("select pg_backend_pid()").fetchone()[0]
    vector = conn.execute(
        "select default_version from pg_available_extensions where name = 'vector'"
    ).fetchone()[0]
print(json.dumps({"pid": server.pid, "vector": vector, "backend": backend}))
"""


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """Outside pytest's temp root (see homes.private_home: pgserver must reach it)."""
    with private_home() as home:
        yield home / "pg"


def _attach_in_subprocesses(data_dir: Path, n: int) -> list[dict[str, object]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ATTACH, str(data_dir)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


THREADS = """
import json, sys, threading
from pathlib import Path
from ctxlake_site import embedded_db
gate = threading.Barrier(16)
sockets, errors = [], []
def connect():
    gate.wait()
    try:
        sockets.append(str(embedded_db.attach(Path(sys.argv[1])).socket_dir))
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=connect) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"sockets": sorted(set(sockets)), "errors": errors}))
"""


@pytest.mark.slow
def test_threads_of_one_process_attaching_at_once_all_connect(data_dir: Path) -> None:
    """A gthread web worker opens connections on many request threads at once (the first
    requests after it starts, or long-polls that gave theirs back): each attaches. The
    library's start-up lock is per process, so threads racing through it failed with
    "Unable to release an unaquired lock" (a 500), found by bench/fleet_scale.py."""
    done = subprocess.run([sys.executable, "-c", THREADS, str(data_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["errors"] == []
    assert len(result["sockets"]) == 1


@pytest.mark.slow
def test_two_processes_attaching_at_once_share_one_server(data_dir: Path) -> None:
    first, second = _attach_in_subprocesses(data_dir, 2)
    assert first["pid"] == second["pid"]
    assert first["vector"]  # pgvector ships with it
    # Both attaching processes have exited; neither owned the server, so it still runs.
    assert embedded_db.is_running(data_dir)


@pytest.mark.slow
def test_the_server_keeps_its_data_across_a_restart(data_dir: Path) -> None:
    import psycopg

    server = embedded_db.attach(data_dir)
    embedded_db.ensure_database(server, "persist")
    with psycopg.connect(host=str(server.socket_dir), user="postgres", dbname="persist") as conn:
        conn.execute("create table if not exists kept (v text)")
        conn.execute("insert into kept values ('still here')")
    assert embedded_db.stop(data_dir)
    assert not embedded_db.is_running(data_dir)
    embedded_db.clear_stop_marker(data_dir)  # what `embedded_db start` / `./ctxlake up` do
    (again,) = _attach_in_subprocesses(data_dir, 1)
    assert again["pid"] != server.pid
    server = embedded_db.attach(data_dir)
    assert server.pid == again["pid"]  # this process sees the restarted server, not a stale one
    with psycopg.connect(host=str(server.socket_dir), user="postgres", dbname="persist") as conn:
        assert conn.execute("select v from kept").fetchall() == [("still here",)]


def test_stopping_a_server_that_is_not_running_says_so(tmp_path: Path) -> None:
    assert embedded_db.stop(tmp_path / "never-started") is False


def test_a_stop_sticks_against_the_next_attach() -> None:
    """The bug: the next connection restarted a stopped server. Now it is refused, cleanly."""
    with private_home() as home:
        data_dir = home / "pg"
        embedded_db.attach(data_dir)
        assert embedded_db.stop(data_dir)
        with pytest.raises(embedded_db.DatabaseStopped, match="embedded_db start"):
            embedded_db.attach(data_dir)
        proc = subprocess.run(
            [sys.executable, "-c", ATTACH, str(data_dir)], cwd=ROOT, capture_output=True,
            text=True, timeout=120,
        )
        assert proc.returncode != 0 and "DatabaseStopped" in proc.stderr
        assert not embedded_db.is_running(data_dir)
        assert embedded_db.start(data_dir).pid  # the operator's start lifts it
        assert embedded_db.is_running(data_dir)


WORKER_STATE = (
    "from django_q.models import Success; from django_q.status import Stat; "
    "print(Success.objects.count(), len(Stat.get_all()))"
)


@pytest.mark.slow
def test_embedded_db_stop_while_workers_run_stays_stopped_then_resumes(tmp_path: Path) -> None:
    """A private installation: its own embedded server, a real django-q2 cluster on it."""
    with private_home() as home:
        _stop_while_workers_run(home, tmp_path)


def _stop_while_workers_run(home: Path, tmp_path: Path) -> None:
    data_dir = home / "pg"
    setup = manage(home, "setup_local", "--no-demo")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    log = (tmp_path / "qcluster.log").open("w")
    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=private_env(home),
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        _wait_for(lambda: shell(home, WORKER_STATE).split()[1] != "0", "a cluster heartbeat")
        stop = manage(home, "embedded_db", "stop")
        assert stop.returncode == 0 and stop.stdout.startswith("stopped"), stop.stderr
        stopped_at = time.monotonic()
        # the cluster retries every few seconds and restarts its pusher: once it has said
        # it found the database stopped on purpose, it has been through that path
        _wait_for(lambda: "ctxlake: database stopped (" in
                  (tmp_path / "qcluster.log").read_text(), "the cluster noticing the stop")
        assert not embedded_db.is_running(data_dir), "a worker restarted the stopped database"
        assert cluster.poll() is None, "the cluster died instead of waiting"
        status = manage(home, "embedded_db", "status")
        assert status.stdout.startswith("stopped (by `manage.py embedded_db stop`")
        doctor = manage(home, "doctor")
        assert doctor.returncode == 1 and "database stopped" in doctor.stdout
        assert not embedded_db.is_running(data_dir), "doctor restarted the stopped database"
        text = (tmp_path / "qcluster.log").read_text()
        lines = [line for line in text.splitlines() if line.strip()]
        minutes = int((time.monotonic() - stopped_at) // 60) + 1
        said = [line for line in lines if line.startswith("ctxlake: database stopped (")]
        assert 1 <= len(said) <= minutes, text
        assert "Traceback" not in text and len(lines) <= minutes + 2, text

        assert manage(home, "embedded_db", "start").returncode == 0
        before = int(shell(home, WORKER_STATE).split()[0])
        shell(home, "from django_q.tasks import async_task; async_task('math.floor', 2.5)")
        _wait_for(lambda: int(shell(home, WORKER_STATE).split()[0]) > before,
                  "a task run by the same cluster after the start")
        assert cluster.poll() is None
    finally:
        cluster.terminate()
        try:
            cluster.wait(timeout=20)
        except subprocess.TimeoutExpired:
            cluster.kill()
        log.close()
        embedded_db.stop(data_dir)


def _wait_for(ready: object, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")
