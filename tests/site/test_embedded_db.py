"""The embedded Postgres: shared by every process, never stopped by one that only attached."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxlake_site import embedded_db

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
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("embedded") / "pg"
    yield path
    embedded_db.stop(path)


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
    (again,) = _attach_in_subprocesses(data_dir, 1)
    assert again["pid"] != server.pid
    server = embedded_db.attach(data_dir)
    assert server.pid == again["pid"]  # this process sees the restarted server, not a stale one
    with psycopg.connect(host=str(server.socket_dir), user="postgres", dbname="persist") as conn:
        assert conn.execute("select v from kept").fetchall() == [("still here",)]


def test_stopping_a_server_that_is_not_running_says_so(tmp_path: Path) -> None:
    assert embedded_db.stop(tmp_path / "never-started") is False
