"""The per-fleet capture setting travels server → manifest → the agent's capture; the
transcript's start time reaches the Session.

Real parts: Postgres, the admin through Django's test client, the real render, the
bridge-side reader (mcp_bridge.capture.mode) on the rendered manifest, the real drain.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client

from ctxlake_site import workers
from fleet.models import RETENTION, Agent, Fleet, Session
from mcp_bridge import contract
from mcp_bridge.capture import mode
from mcp_bridge.config import Config
from mcp_bridge.contract.spool import Spool


def _bridge_config(tmp_path: Path, fleet: str) -> Config:
    return Config.from_env({"CTXLAKE_HOME": str(tmp_path / "home"),
                            "CTXLAKE_CACHE_DIR": str(tmp_path / "cache"),
                            "CTXLAKE_FLEET_ID": fleet, "CTXLAKE_AGENT_ID": "ada"})


@pytest.mark.parametrize("value", list(Fleet.CaptureMode.values))
def test_the_render_carries_the_setting_to_the_agents_capture(
    fleet_a: Fleet, spool_dir: Path, tmp_path: Path, value: str,
) -> None:
    fleet_a.capture_mode = value
    fleet_a.save(update_fields=["capture_mode"])
    workers.render_fleet(fleet_a)
    manifest = json.loads((tmp_path / "cache" / "fleet-a" / contract.MANIFEST).read_text())
    assert manifest["capture"] == value
    assert mode.resolve(_bridge_config(tmp_path, "fleet-a"), {}).value == value


def test_the_render_carries_the_fleets_cap_on_candidates(
    fleet_a: Fleet, spool_dir: Path, tmp_path: Path,
) -> None:
    assert fleet_a.capture_max_candidates == contract.CAPTURE_MAX_DEFAULT == 3
    fleet_a.capture_max_candidates = 1
    fleet_a.save(update_fields=["capture_max_candidates"])
    workers.render_fleet(fleet_a)
    manifest = json.loads((tmp_path / "cache" / "fleet-a" / contract.MANIFEST).read_text())
    assert manifest["capture_max"] == 1
    assert mode.max_candidates(_bridge_config(tmp_path, "fleet-a")) == 1


def test_new_fleets_capture_candidates_and_the_choices_are_the_contracts(db: None) -> None:
    assert Fleet.objects.create(slug="f-new", name="n").capture_mode == contract.CAPTURE_CANDIDATES
    assert tuple(Fleet.CaptureMode.values) == contract.CAPTURE_MODES
    with pytest.raises(IntegrityError), transaction.atomic():
        Fleet.objects.create(slug="f-bad", name="b", capture_mode="everything")


def test_the_admin_shows_and_changes_the_setting(fleet_a: Fleet, settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-1234-root"))
    listing = client.get("/admin/fleet/fleet/").content.decode()
    assert "capture mode" in listing.lower() and "candidates" in listing
    page = client.get(f"/admin/fleet/fleet/{fleet_a.pk}/change/").content.decode()
    for value in contract.CAPTURE_MODES:
        assert f'value="{value}"' in page
    form = {"slug": fleet_a.slug, "name": fleet_a.name, "memory_mode": fleet_a.memory_mode,
            "capture_mode": contract.CAPTURE_LLM, "default_lease_ttl_secs": 3600,
            "capture_max_candidates": 2,
            "min_independent_sessions": 1, "repo_url_template": "", "retire_idle_hours": 24,
            "moderators-TOTAL_FORMS": 0, "moderators-INITIAL_FORMS": 0,
            **{rule.field: rule.default_days for rule in RETENTION}}  # the form's other fields
    response = client.post(f"/admin/fleet/fleet/{fleet_a.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    fleet_a.refresh_from_db()
    assert (fleet_a.capture_mode, fleet_a.capture_max_candidates) == (contract.CAPTURE_LLM, 2)
    for cap in ("11", "-1", "99999999999999999999", "2\x00"):
        refused = client.post(f"/admin/fleet/fleet/{fleet_a.pk}/change/",
                              {**form, "capture_max_candidates": cap})
        assert refused.status_code == 200 and "errorlist" in refused.content.decode(), cap
    fleet_a.refresh_from_db()
    assert fleet_a.capture_max_candidates == 2
    bad = client.post(f"/admin/fleet/fleet/{fleet_a.pk}/change/",
                      {**form, "capture_mode": "candidates\x00"})
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()
    fleet_a.refresh_from_db()
    assert fleet_a.capture_mode == contract.CAPTURE_LLM


def test_create_fleet_takes_the_setting(db: None, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("create_fleet", "f-llm", "--capture", contract.CAPTURE_LLM)
    assert Fleet.objects.get(slug="f-llm").capture_mode == contract.CAPTURE_LLM
    assert "capture candidates+llm" in capsys.readouterr().out
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("create_fleet", "f-x", "--capture", "all")


# -- the session's start, from its transcript ------------------------------------------


def _end(spool_dir: Path, session: str, **payload: Any) -> None:
    Spool(spool_dir, fleet="fleet-a", agent="ada", session=session).append(
        contract.KIND_SESSION_END, {"outcome": "success", "summary": "s", **payload})


def test_the_transcripts_start_moves_the_sessions_start_earlier(
    fleet_a: Fleet, ada: Agent, spool_dir: Path,
) -> None:
    Spool(spool_dir, fleet="fleet-a", agent="ada", session="s-1").append(
        contract.KIND_LEASE_CLAIM, {"paths": ["src/a.py"]})
    workers.drain_spool("fleet-a")
    heard = Session.objects.get(session_id="s-1").started_at
    began = heard - timedelta(hours=2)
    _end(spool_dir, "s-1", started_at=began.isoformat())
    workers.drain_spool("fleet-a")
    session = Session.objects.get(session_id="s-1")
    assert session.started_at == began and session.ended_at >= heard


@pytest.mark.parametrize("offset", [timedelta(days=31), timedelta(hours=-1)])
def test_a_start_too_early_or_later_than_first_heard_is_ignored(
    fleet_a: Fleet, ada: Agent, spool_dir: Path, offset: timedelta,
) -> None:
    Spool(spool_dir, fleet="fleet-a", agent="ada", session="s-2").append(
        contract.KIND_LEASE_CLAIM, {"paths": ["src/b.py"]})
    workers.drain_spool("fleet-a")
    heard = Session.objects.get(session_id="s-2").started_at
    _end(spool_dir, "s-2", started_at=(heard - offset).isoformat())
    report = workers.drain_spool("fleet-a")
    assert report.applied == 1
    assert Session.objects.get(session_id="s-2").started_at == heard
