"""A drain killed with SIGKILL mid-batch, then rerun, applies every event exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.models import AppliedEvent, Fleet, Lease
from mcp_bridge.contract.spool import Spool
from tests.helpers import env_for_test_database

ROOT = Path(__file__).resolve().parents[2]
EVENTS = 3000


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_drain_killed_mid_batch_then_rerun_applies_each_event_once(spool_dir: Path) -> None:
    Fleet.objects.create(slug="kill", name="kill")
    spool = Spool(spool_dir, fleet="kill", agent="ada", file_max_bytes=64 << 10)
    for i in range(EVENTS):
        spool.append("lease.claim", {"paths": [f"f{i}.py"], "reason": "", "ttl_secs": 600})
    # one agent holds every lease here: lift the per-agent cap (default 500) above EVENTS
    env = env_for_test_database(
        CTXLAKE_SPOOL_DIR=str(spool_dir), CTXLAKE_MAX_LIVE_LEASES_PER_AGENT=str(EVENTS)
    )
    cmd = [sys.executable, "manage.py", "drain_spool", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while AppliedEvent.objects.count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = AppliedEvent.objects.count()
    assert 0 < partial < EVENTS, "the kill should land mid-drain"
    rerun = subprocess.run(
        [*cmd[:-1], "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr
    assert AppliedEvent.objects.count() == EVENTS
    assert Lease.objects.count() == EVENTS  # one lease per event: none lost, none doubled
    assert sorted(p.name for p in (spool_dir / "mcp").glob("*.ndjson")) == ["kill.ndjson"]
