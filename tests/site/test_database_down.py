"""The database goes away and comes back: REST answers 503, the bridge keeps answering,
and the backlog the bridge queued meanwhile is drained once the database returns.

A separate pgvector server (not the shared embedded one) is started for this module,
reached through DATABASE_URL by a real gunicorn, and stopped in the middle.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from ctxlake_site import embedded_db
from mcp_bridge import tools
from mcp_bridge.config import Config

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Site:
    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "pg"
        server = embedded_db.attach(self.data)
        embedded_db.ensure_database(server, "ctxlake_down")
        url = f"postgres://postgres@{quote(str(server.socket_dir), safe='')}/ctxlake_down"
        self.env = {**os.environ, "DATABASE_URL": url, "CTXLAKE_HOME": str(tmp / "home"),
                    "CTXLAKE_Q_SYNC": "true"}

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    # Directly under /tmp, not pytest's temp root: every pytest run resets that root to
    # 0700, and this server runs as another user that must keep reaching its data.
    base = Path(tempfile.mkdtemp(prefix="ctxlake-down-"))
    site = Site(base)
    yield site
    embedded_db.stop(site.data)
    shutil.rmtree(base, ignore_errors=True)


def _get(url: str, token: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_rest_answers_503_while_the_database_is_down_and_nothing_is_lost(site: Site) -> None:
    assert site.manage("migrate", "--noinput").returncode == 0
    assert site.manage("create_fleet", "down", "--memory-mode", "live").returncode == 0
    issued = site.manage("issue_token", "--fleet", "down", "--role", "operator", "--name",
                         "ops", "--json")
    token = json.loads(issued.stdout)["token"]
    assert site.manage("render_cache", "--fleet", "down", "--quiet").returncode == 0
    port = _free_port()
    web = subprocess.Popen(
        # the production config: gthread, its request threads sharing a connection pool
        [sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--config", "python:ctxlake_site.gunicorn_conf", "--workers", "1"],
        cwd=ROOT, env=site.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}/api/v1/fleets/down"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _get(f"{base}/status", token)[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        assert _get(f"{base}/status", token)[0] == 200

        embedded_db.stop(site.data)
        for path in ("status", "leases", "claims/search?q=x"):
            code, headers, body = _get(f"{base}/{path}", token)
            assert code == 503, (path, body[:300])
            assert headers.get("Retry-After") == "10"
            assert json.loads(body)["code"] == "database_unavailable"

        cfg = Config.from_env({
            "CTXLAKE_HOME": site.env["CTXLAKE_HOME"], "CTXLAKE_FLEET_ID": "down",
            "CTXLAKE_AGENT_ID": "ada", "CTXLAKE_SESSION_ID": "s-1"})
        bridge = tools.Bridge.from_config(cfg)
        status = tools.fleet_status(bridge)
        assert status["as_of"] is not None  # answered from the cache
        queued = tools.fleet_claim(bridge, ["src/a.py"], "while the database is down")
        assert queued["status"] == "queued for sync"

        embedded_db.start(site.data)  # the database is back
        drained = site.manage("drain_spool", "--json")
        assert drained.returncode == 0, drained.stderr
        assert json.loads(drained.stdout)["applied"] == 1, drained.stdout + drained.stderr
        # The web's pooled connections were lost with the server: its next attempts find it
        # again (ctxlake_site.pooled_pg); until one has, a request is still answered 503.
        deadline = time.monotonic() + 60
        while (answer := _get(f"{base}/leases", token))[0] == 503:
            assert time.monotonic() < deadline, "REST still 503 a minute after the restart"
            time.sleep(0.2)
        code, _, body = answer
        assert code == 200 and b"src/a.py" in body
    finally:
        web.terminate()
        _, err = web.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()[-2000:]
