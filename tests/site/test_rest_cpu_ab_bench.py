"""bench/rest_cpu_ab.py at a tiny size, end to end: two real gunicorn servers, this checkout
and a commit's worktree, on this test run's database. No figure is asserted (timings belong
to the bench); what is: both servers answered, the report came out, the worktree and the
fleet are gone, and a baseline with other migrations is refused before anything starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet.models import Fleet
from tests.helpers import env_for_test_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/rest_cpu_ab.py", *args], cwd=ROOT,
                          env=env_for_test_database(), capture_output=True, text=True,
                          timeout=600)


def test_the_bench_measures_both_servers_and_leaves_nothing_behind() -> None:
    worktrees = _git("worktree", "list")
    done = _bench("--baseline", "HEAD", "--rounds", "2", "--requests", "9", "--clients", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Internal Server Error" not in done.stderr, done.stderr[-4000:]
    assert done.stdout.count("round ") == 2
    for what in ("gunicorn CPU", "Postgres CPU", "wall"):
        assert f"{what}" in done.stdout and "median of 2" in done.stdout
    assert _git("worktree", "list") == worktrees
    assert not Fleet.objects.filter(slug__startswith="bench-ab-").exists()


def test_a_baseline_with_other_migrations_is_refused() -> None:
    changed = _git("log", "-1", "--format=%H", "--", "fleet/migrations", "claims/migrations",
                   "ctxlake_site/migrations")
    done = _bench("--baseline", f"{changed}^")
    assert done.returncode != 0
    assert "other migrations than this checkout" in done.stderr
    assert not Fleet.objects.filter(slug__startswith="bench-ab-").exists()
    for bad in ("0", "-3", "x"):
        refused = _bench("--baseline", "HEAD", "--rounds", bad)
        assert refused.returncode == 2 and "--rounds" in refused.stderr
