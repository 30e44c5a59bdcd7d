"""The same-run A/B benches against another commit, at a tiny size, end to end.

- bench/rest_cpu_ab.py: two real gunicorn servers, this checkout and a commit's worktree,
  on this test run's database; a baseline with other migrations is refused before anything
  starts.
- bench/write_cpu_ab.py: against a commit with other migrations, each side's database
  migrated and seeded by its own code, its real gunicorn and qcluster, the write mix served
  on both.

No figure is asserted (timings belong to the benches); what is: both sides answered, the
report came out, and the worktrees, fleets and databases are gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from fleet.models import Fleet
from tests.helpers import env_for_test_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT,
                          env=env_for_test_database(), capture_output=True, text=True,
                          timeout=900)


def _bench_databases() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT datname FROM pg_database WHERE datname LIKE 'bench_ab_%%'")
        return [row[0] for row in cur.fetchall()]


def test_rest_cpu_ab_measures_both_servers_and_leaves_nothing_behind() -> None:
    worktrees = _git("worktree", "list")
    done = _bench("rest_cpu_ab.py", "--baseline", "HEAD", "--rounds", "2", "--requests", "9",
                  "--clients", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Internal Server Error" not in done.stderr, done.stderr[-4000:]
    assert done.stdout.count("round ") == 2
    for what in ("gunicorn CPU", "Postgres CPU", "wall"):
        assert f"{what}" in done.stdout and "median of 2" in done.stdout
    assert _git("worktree", "list") == worktrees
    assert not Fleet.objects.filter(slug__startswith="bench-ab-").exists()


def test_rest_cpu_ab_refuses_a_baseline_with_other_migrations() -> None:
    changed = _git("log", "-1", "--format=%H", "--", "fleet/migrations", "claims/migrations",
                   "ctxlake_site/migrations")
    done = _bench("rest_cpu_ab.py", "--baseline", f"{changed}^")
    assert done.returncode != 0
    assert "other migrations than this checkout" in done.stderr
    assert not Fleet.objects.filter(slug__startswith="bench-ab-").exists()
    for bad in ("0", "-3", "x"):
        refused = _bench("rest_cpu_ab.py", "--baseline", "HEAD", "--rounds", bad)
        assert refused.returncode == 2 and "--rounds" in refused.stderr


def test_write_cpu_ab_serves_the_writes_on_both_sides_and_leaves_nothing_behind() -> None:
    worktrees = _git("worktree", "list")
    migrated = _git("log", "-1", "--format=%H", "--", "fleet/migrations", "claims/migrations")
    done = _bench("write_cpu_ab.py", "--baseline", f"{migrated}^", "--agents", "4",
                  "--write-every", "1", "--seconds", "2", "--claims", "20", "--rounds", "1",
                  "--settle", "5", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    figures = json.loads(done.stdout)
    for side in ("baseline", "this"):
        (turn,) = figures[side]
        assert turn["served"] >= 4 and turn["failed"] == 0, turn
        assert turn["ms_by_process"]["gunicorn"] > 0 and turn["ms_per_write"] > 0
    assert "migrated and seeded by baseline's code" in done.stderr
    assert "server CPU per write, median of 1" in done.stderr
    assert _git("worktree", "list") == worktrees
    assert _bench_databases() == []


def test_write_cpu_ab_refuses_bad_options_before_anything_starts() -> None:
    for option, bad in (("--rounds", "0"), ("--agents", "-3"), ("--seconds", "x")):
        refused = _bench("write_cpu_ab.py", "--baseline", "HEAD", option, bad)
        assert refused.returncode == 2 and option in refused.stderr
    missing = _bench("write_cpu_ab.py", "--baseline", "no-such-ref-anywhere", "--rounds", "1")
    assert missing.returncode != 0 and "no-such-ref-anywhere" in missing.stderr
    assert _bench_databases() == []
