from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from ctxlake_site import drain, workers
from fleet import tokens
from fleet.models import Agent, Fleet, FleetModerator

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_doctor_is_green_on_a_working_installation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    out = StringIO()
    call_command("doctor", "--json", stdout=out)
    checks = {c["name"]: c for c in json.loads(out.getvalue())}
    assert set(checks) == {"database", "pgvector", "migrations", "cache dir", "spool dir",
                           "worker", "broker", "index bloat", "pipeline", "unknown fleets",
                           "retention"}
    assert all(c["status"] == "ok" for n, c in checks.items() if n != "worker"), checks
    assert checks["pipeline"]["detail"].startswith("no fleets yet")
    assert "PostgreSQL" in checks["database"]["detail"]


@pytest.mark.django_db
def test_doctor_fails_when_a_directory_is_not_writable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(blocker / "cache"))
    out = StringIO()
    with pytest.raises(Exception, match="cache dir"):
        call_command("doctor", stdout=out)
    assert "cache dir" in out.getvalue() and "FAIL" in out.getvalue()


def test_doctor_fails_clearly_when_the_database_is_down(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://nobody@127.0.0.1:9/nowhere",
        "CTXLAKE_HOME": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "doctor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "database" in result.stdout and "FAIL" in result.stdout
    assert "skipped: database unreachable" in result.stdout
    assert "1 check(s) failed" not in result.stderr  # every database check is reported failed


def test_with_the_database_down_doctor_reports_the_spool_backlog_from_the_files(
    tmp_path: Path,
) -> None:
    """400 lines waiting are the news when the database is down, not "skipped"."""
    mcp = tmp_path / "spool" / "mcp"
    mcp.mkdir(parents=True)
    line = b'{"v":1,"id":"x","kind":"lease.release"}\n'
    (mcp / "acme.ndjson").write_bytes(line * 397 + b'{"torn')  # a torn line is not waiting
    (mcp / "acme.20261204T000000.ndjson").write_bytes(line * 1)  # rotated, same fleet
    (mcp / "beta.ndjson").write_bytes(line * 2)
    (mcp / "not a fleet!.ndjson").write_bytes(line * 50)  # no fleet's file: not counted
    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:9/nowhere",
           "CTXLAKE_HOME": str(tmp_path)}
    env.pop("CTXLAKE_SPOOL_DIR", None)
    result = subprocess.run([sys.executable, "manage.py", "doctor", "--json"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    pipeline = next(c for c in json.loads(result.stdout) if c["name"] == "pipeline")
    assert pipeline["status"] == "fail"
    assert "400 line(s) in 3 spool file(s)" in pipeline["detail"]
    assert "acme 398, beta 2" in pipeline["detail"]
    assert pipeline["data"]["spool_lines"] == 400
    assert "skipped" not in pipeline["detail"]


# -- the pipeline ------------------------------------------------------------------------------

@pytest.fixture
def troubled(spool_for: Any, spool_dir: Path, fleet_a: Fleet, ada: Agent) -> Path:
    """fleet_a with a dead letter, a drained event and two waiting lines; a mistyped fleet's
    spool in mcp/ (waiting) and one the drain quarantined."""
    writer = spool_for(fleet_a.slug, "ada")
    writer.append("lease.release", {"paths": [], "all": True})
    with open(spool_dir / "mcp" / f"{fleet_a.slug}.ndjson", "ab") as f:
        f.write(b'{"this is": "not an event"}\n')
    report = workers.drain_spool()
    assert report.applied == 1 and report.dead == 1
    writer.append("lease.release", {"paths": [], "all": True})
    writer.append("lease.release", {"paths": [], "all": True})
    spool_for("fleet-aa", "ada").append("lease.release", {"paths": [], "all": True})
    quarantine = spool_dir / drain.QUARANTINE
    quarantine.mkdir()
    (quarantine / "typo-fleet.ndjson").write_bytes(b'{"id": "1"}\n{"id": "2"}\n')
    return spool_dir


@pytest.mark.django_db
def test_doctor_tells_the_truth_about_the_pipeline(troubled: Path, fleet_a: Fleet) -> None:
    out = StringIO()
    call_command("doctor", "--json", stdout=out)
    checks = {c["name"]: c for c in json.loads(out.getvalue())}
    mine = checks[f"fleet {fleet_a.slug}"]
    assert mine["status"] == "warn"
    data = mine["data"]
    assert data["backlog_lines"] == 2 and data["backlog_oldest"] is not None
    assert data["dead_letters"] == 1 and data["dead_newest_reason"]
    assert data["last_drain"] is not None and data["rendered_at"] is None
    assert "never rendered" in data["problems"] and "1 dead letter(s)" in data["problems"]
    assert "backlog 2 line(s), oldest" in mine["detail"] and "dead letters 1 (newest:" in mine[
        "detail"]
    stray = checks["unknown fleets"]
    assert stray["status"] == "warn" and "1 quarantined, 1 waiting" in stray["detail"]
    assert [f["fleet"] for f in stray["data"]["quarantined"]] == ["typo-fleet"]
    assert [(f["fleet"], f["lines"]) for f in stray["data"]["waiting"]] == [("fleet-aa", 1)]
    assert "create_fleet" in stray["detail"]

    table = StringIO()
    call_command("doctor", stdout=table)  # warnings alone do not fail
    assert "typo-fleet.ndjson (2 lines)" in table.getvalue()


@pytest.mark.django_db
def test_the_admin_index_shows_the_pipeline_panel(troubled: Path, fleet_a: Fleet,
                                                  admin_client: Any) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert 'id="pipeline-panel"' in page
    assert fleet_a.slug in page and "never rendered" in page and "1 dead letter(s)" in page
    assert "typo-fleet.ndjson" in page and "fleet-aa.ndjson" in page


@pytest.mark.django_db
def test_a_moderator_sees_only_their_fleets_and_no_stray_files(
        troubled: Path, fleet_a: Fleet, fleet_b: Fleet, mod: Any, client: Any) -> None:
    FleetModerator.objects.create(fleet=fleet_b, user=mod)
    client.force_login(mod)
    page = client.get("/admin/").content.decode()
    assert 'id="pipeline-panel"' in page and fleet_b.slug in page
    assert f"<strong>{fleet_a.slug}</strong>" not in page and "typo-fleet" not in page


@pytest.mark.django_db
def test_health_endpoint_for_operators(troubled: Path, fleet_a: Fleet, ada: Agent) -> None:
    operator = tokens.issue_token(fleet_a, role="operator", name="ops").secret
    agent = tokens.issue_token(fleet_a, role="agent", name="a", agent=ada).secret
    api = APIClient()
    assert api.get("/api/v1/health").status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent}")
    assert api.get("/api/v1/health").status_code == 403
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {operator}")
    answer = api.get("/api/v1/health")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "warn"
    (mine,) = body["fleets"]
    assert mine["fleet"] == fleet_a.slug and mine["backlog_lines"] == 2
    assert mine["dead_letters"] == 1 and mine["cache_behind"] is True
    assert [f["fleet"] for f in body["quarantined"]] == ["typo-fleet"]
    assert [f["fleet"] for f in body["waiting"]] == ["fleet-aa"]


def test_doctor_warns_when_this_process_and_the_workers_use_different_brokers(
    db: None, settings: Any
) -> None:
    from django.core.cache import cache

    from ctxlake_site.management.commands import doctor
    from fleet import rendering

    cache.set(rendering.WORKER_BROKER_KEY, "redis")  # what a Redis cluster's follower notes
    assert settings.Q_CLUSTER.get("orm")  # this process: the ORM broker
    check = doctor._broker()
    assert check.status == "warn" and "CTXLAKE_REDIS_URL" in check.detail
    cache.set(rendering.WORKER_BROKER_KEY, "orm")
    assert doctor._broker().status == "ok"
