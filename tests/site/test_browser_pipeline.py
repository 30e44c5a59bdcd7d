"""The admin index's pipeline panel in a real headless Chromium; screenshot in artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from ctxlake_site import drain, workers
from fleet.models import Agent, Fleet
from tests.claims.test_browser_review import ARTIFACTS, page  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "ops-pass-1234"


def test_the_admin_index_shows_the_pipeline(page: Any, live_server: Any, spool_for: Any,  # noqa: F811
                                            spool_dir: Path) -> None:
    fleet = Fleet.objects.create(slug="acme", name="Acme", memory_mode="live")
    Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code")
    writer = spool_for("acme", "ada")
    writer.append("lease.claim", {"paths": ["src/**"], "reason": "refactor", "ttl_secs": 600})
    with open(spool_dir / "mcp" / "acme.ndjson", "ab") as f:
        f.write(b'{"kind": "lease.claim"}\n')
    workers.drain_spool()
    workers.render_fleet(fleet)
    writer.append("lease.release", {"paths": [], "all": True})
    spool_for("acmee", "ada").append("lease.release", {"paths": [], "all": True})
    quarantine = spool_dir / drain.QUARANTINE
    quarantine.mkdir()
    (quarantine / "acme-typo.ndjson").write_bytes(b'{"id": "1"}\n' * 3)
    User.objects.create_superuser("root", password=PASSWORD)

    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    panel = page.locator("#pipeline-panel")
    panel.wait_for()
    text = panel.inner_text()
    assert "acme" in text and "1 dead letter(s)" in text
    assert "acme-typo.ndjson" in text and "acmee.ndjson" in text
    assert "no cluster heartbeat" in text
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-pipeline-panel.png"), full_page=True)
