"""bench/write_cpu_ab.py at a tiny size, end to end, against a commit with other migrations:
each side's database migrated and seeded by its own code, its real gunicorn and qcluster,
the write mix served on both. No figure is asserted (timings belong to the bench); what is:
both sides served every write, the report came out, and the worktree and both databases
are gone afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import env_for_test_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "bench/write_cpu_ab.py", *args], cwd=ROOT,
                          env=env_for_test_database(), capture_output=True, text=True,
                          timeout=900)


def _bench_databases() -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT datname FROM pg_database WHERE datname LIKE 'bench_ab_%%'")
        return [row[0] for row in cur.fetchall()]


def test_both_sides_serve_the_writes_and_nothing_is_left_behind() -> None:
    worktrees = _git("worktree", "list")
    migrated = _git("log", "-1", "--format=%H", "--", "fleet/migrations", "claims/migrations")
    done = _bench("--baseline", f"{migrated}^", "--agents", "4", "--write-every", "1",
                  "--seconds", "2", "--claims", "20", "--rounds", "1", "--settle", "5", "--json")
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


def test_bad_options_are_refused_before_anything_starts() -> None:
    for option, bad in (("--rounds", "0"), ("--agents", "-3"), ("--seconds", "x")):
        refused = _bench("--baseline", "HEAD", option, bad)
        assert refused.returncode == 2 and option in refused.stderr
    missing = _bench("--baseline", "no-such-ref-anywhere", "--rounds", "1")
    assert missing.returncode != 0 and "no-such-ref-anywhere" in missing.stderr
    assert _bench_databases() == []
