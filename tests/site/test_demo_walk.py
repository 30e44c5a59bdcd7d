"""README's five-minute walk, as far as a test can follow it.

`./ctxlake up` seeds with `manage.py setup_local`; a person logs in with the password it
kept, finds the claim in the review queue and promotes it (the admin's Promote calls
claims.moderation.promote_claim; the README's command-line alternative is run as written);
the workers render the fleet's cache; then an agent sees the claim, attributed: in the
README's `python -m mcp_bridge briefing` line, and through `memory_search` of a bridge
spawned for the fleet and agent the README's `install` line names. Not followed here: the
browser itself, gunicorn and the django-q2 cluster (the render is called directly, as the
task the promotion requests would), and Claude Code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from claims import moderation, tasks
from claims.models import Claim
from ctxlake_site import workers
from fleet.models import Fleet
from tests.site.test_end_to_end import BridgeProcess

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEMO_TEXT = "The payments tests need STRIPE_API_BASE pointed at the local mock"
ATTRIBUTION = re.compile(
    r"\[cc-01, \d{4}-\d{2}-\d{2}, in shop, 1 independent session, conf 0\.80\]")


def _readme_line(pattern: str) -> re.Match[str]:
    found = re.search(pattern, README, re.M)
    assert found, f"README's walk has no line matching {pattern!r}"
    return found


@pytest.fixture
def home(db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private CTXLAKE_HOME for the admin password, the cache and the spool. The test
    database's connection is open by now (`db`), so it stays the one in use."""
    home = tmp_path / "home"
    monkeypatch.setenv("CTXLAKE_HOME", str(home))
    monkeypatch.delenv("CTXLAKE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CTXLAKE_SPOOL_DIR", raising=False)
    return home


def _set_up(home: Path) -> tuple[Fleet, User, str]:
    """What `./ctxlake up` runs before it starts the web server and the workers."""
    out = StringIO()
    call_command("setup_local", stdout=out)
    password = (home / "admin-password").read_text().strip()
    # the path is printed, never the password: `up` runs this on every start, and its
    # output may go to a service manager's journal
    assert f"admin login: admin, password in {home / 'admin-password'}" in out.getvalue()
    assert password not in out.getvalue()
    return Fleet.objects.get(slug="demo"), User.objects.get(username="admin"), password


def _briefing(home: Path) -> str:
    """README's briefing line as written, with the test's CTXLAKE_HOME for the default."""
    line = _readme_line(r"^ *((?:CTXLAKE_[A-Z_]+=\S+ )+)\S*python (-m mcp_bridge briefing)$")
    env = {
        **os.environ,
        "CTXLAKE_HOME": str(home),
        **dict(pair.split("=", 1) for pair in line.group(1).split()),
    }
    run = subprocess.run(
        [sys.executable, *line.group(2).split()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_it_walks_from_the_demo_fleet_to_an_attributed_briefing(home: Path) -> None:
    demo, admin, password = _set_up(home)
    assert DEMO_TEXT not in _briefing(home)  # proposed: no agent reads it yet

    browser = Client()
    assert browser.login(username="admin", password=password)
    assert "Review queue (1 waiting)" in browser.get("/admin/").content.decode()
    leases = browser.get("/admin/fleet/lease/").content.decode()
    assert "⚠ overlaps bo" in leases and "⚠ overlaps ada" in leases
    claim = Claim.objects.get(fleet=demo, status=Claim.Status.PROPOSED)
    assert claim.public_id == "cc-01"
    assert DEMO_TEXT in browser.get(f"/admin/claims/claim/{claim.pk}/change/").content.decode()

    promoted = moderation.promote_claim(claim, by=admin)  # what the admin's Promote calls
    assert (promoted.status, promoted.scope) == (Claim.Status.PROMOTED, Claim.Scope.FLEET)
    workers.render_fleet(demo)

    briefing = _briefing(home)
    assert DEMO_TEXT in briefing
    assert ATTRIBUTION.search(briefing), briefing


def test_it_promotes_from_the_command_line_and_memory_search_answers(
        home: Path, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    """The demo claim is filed as an agent's proposal is: its embedding pass is queued for
    the workers, so once promoted, the demo's memory_search is hybrid as a fleet's is."""
    import django_q.tasks
    from django.core.cache import cache

    queued: list[str] = []
    monkeypatch.setattr(django_q.tasks, "async_task", lambda func, *a, **kw: queued.append(func))
    cache.delete(tasks.PENDING_KEY)
    with django_capture_on_commit_callbacks(execute=True):
        demo, _, _ = _set_up(home)
    assert "claims.tasks.embed_pending" in queued
    tasks.embed_pending()  # what that task runs in a worker
    promote = _readme_line(r"manage\.py (claims promote .*)$")
    call_command(*shlex.split(promote.group(1)), stdout=StringIO())
    assert Claim.objects.get(fleet=demo).status == Claim.Status.PROMOTED
    workers.render_fleet(demo)

    install = _readme_line(r"mcp_bridge install --runtime claude-code --fleet (\S+) --agent (\S+)")
    fleet, agent = install.groups()
    bridge = BridgeProcess({**os.environ, "CTXLAKE_FLEET_ID": fleet, "CTXLAKE_AGENT_ID": agent})
    try:
        bridge.request(
            "initialize",
            {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "walk", "version": "1"},
            },
        )
        bridge.notify("notifications/initialized")
        found = bridge.tool("memory_search", query="what do the payments tests need")
    finally:
        bridge.close()
    (hit, *_) = found["results"]
    assert found["mode"] == "hybrid", found
    assert hit["id"] == "cc-01" and DEMO_TEXT in hit["text"]
    assert ATTRIBUTION.fullmatch(hit["attribution"]), hit
