"""The scale-out path for real: a django-q2 cluster on a Redis broker drains and renders."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.models import AppliedEvent, Fleet
from mcp_bridge.contract.spool import Spool
from tests.helpers import env_for_test_database

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("Debian's redis-server is not installed (./ctxlake test installs it)")
    port = _free_port()
    proc = subprocess.Popen(
        [
            server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


def test_a_cluster_on_redis_drains_the_spool_and_renders_the_cache(
    redis_url: str, tmp_path: Path
) -> None:
    fleet = Fleet.objects.create(slug="scale", name="scale", memory_mode="live")
    spool_dir, cache_dir = tmp_path / "spool", tmp_path / "cache"
    spool = Spool(spool_dir, fleet="scale", agent="ada")
    for i in range(20):
        spool.append("lease.claim", {"paths": [f"f{i}.py"], "reason": "", "ttl_secs": 600})
    env = env_for_test_database(
        CTXLAKE_REDIS_URL=redis_url,
        CTXLAKE_SPOOL_DIR=str(spool_dir),
        CTXLAKE_CACHE_DIR=str(cache_dir),
        CTXLAKE_Q_WORKERS="1",
    )
    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: a kill reaches the cluster's children too
    )
    try:
        enqueue = (
            "from django_q.tasks import async_task; "
            "async_task('ctxlake_site.workers.drain_spool'); "
            f"async_task('ctxlake_site.workers.render_fleet_cache', {fleet.pk})"
        )
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", enqueue],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 60
        manifest = cache_dir / "scale" / "manifest.json"
        while time.monotonic() < deadline and not (
            AppliedEvent.objects.count() == 20 and manifest.exists()
        ):
            time.sleep(0.2)
    finally:
        cluster.send_signal(signal.SIGTERM)
        try:
            cluster.wait(timeout=20)
        except subprocess.TimeoutExpired:  # a drain follower still busy: not its children
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait(timeout=10)
    assert AppliedEvent.objects.count() == 20
    assert manifest.exists(), cluster.stderr.read().decode()[-2000:] if cluster.stderr else ""
    roster = json.loads((cache_dir / "scale" / "roster.json").read_text())
    assert len(roster["agents"][0]["leases"]) == 20
