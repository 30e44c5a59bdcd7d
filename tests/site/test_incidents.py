"""Incidents end to end: the real PreToolUse hook warns ada about bo's lease and spools a
lease.intrusion; the drain records one incident; the render tells bo (fleet_status
`yours`, a one-time note in his next tool answer, the briefing); the admin and REST list it.
The other sources (a refused pickup, a lasting overlap, a retirement) each make one too."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from ctxlake_site import workers
from fleet import actions, incidents, leases, retirement
from fleet.models import (
    Activity,
    Agent,
    DeadLetter,
    Fleet,
    FleetModerator,
    Handoff,
    Incident,
    Lease,
)
from mcp_bridge import tools
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import Spool
from tests.fleet.conftest import ApiAs
from tests.site.test_handoff_pickup_drain import bridge_of, drain_and_render

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "payments").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def hook(repo: Path, spool_dir: Path, agent: str, path: str) -> dict[str, Any]:
    """The hook process exactly as Claude Code runs it before an Edit."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CTXLAKE_FLEET_ID": "fleet-a",
           "CTXLAKE_AGENT_ID": agent, "CTXLAKE_HOME": str(spool_dir.parent / "home"),
           "CTXLAKE_SPOOL_DIR": str(spool_dir),
           "CTXLAKE_CACHE_DIR": str(spool_dir.parent / "cache")}
    body = {"session_id": f"{agent}-s1", "hook_event_name": "PreToolUse", "cwd": str(repo),
            "tool_name": "Edit", "tool_input": {"file_path": str(repo / path)}}
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "pre-tool-use"],
                          input=json.dumps(body), capture_output=True, text=True, env=env,
                          cwd=repo, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout else {}


def holds(agent: Agent, path: str, *, ago: timedelta = timedelta(0)) -> Lease:
    return Lease.objects.create(fleet=agent.fleet, agent=agent, path=path, reason="refunds",
                                acquired_at=timezone.now() - ago,
                                expires_at=timezone.now() + timedelta(hours=1))


def test_an_edit_in_another_agents_lease_is_one_incident_told_to_the_holder_once(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path, repo: Path, mod: Any,
    api_as: ApiAs, settings: Any,
) -> None:
    holds(bo, "src/payments/**")
    workers.render_fleet(fleet_a)

    warned = hook(repo, spool_dir, "ada", "src/payments/stripe.py")
    hook(repo, spool_dir, "ada", "src/payments/stripe.py")  # the same edit again: one incident
    drain_and_render(fleet_a)

    assert "leased by bo" in warned["hookSpecificOutput"]["additionalContext"]
    assert not DeadLetter.objects.exists()
    [incident] = Incident.objects.all()
    assert (incident.kind, incident.actor, incident.holder, incident.paths,
            incident.actor_session) == ("edit_in_lease", ada, bo, ["src/payments/stripe.py"],
                                        "ada-s1")
    assert Activity.objects.filter(verb=incidents.VERB, target_id=str(incident.pk)).count() == 1

    bos = bridge_of("bo", fleet_a, spool_dir)
    [told] = tools.fleet_status(bos)["yours"]["incidents"]
    assert told["id"] == f"i-{incident.pk}" and told["by"] == "ada"
    assert told["text"].startswith("ada edited src/payments/stripe.py inside your lease at ")
    first = bos.call("fleet_history", {})  # the next answer of any tool says it, once
    assert "ada edited src/payments/stripe.py inside your lease" in first["note"]
    assert "note" not in bos.call("fleet_history", {})
    assert "note" not in bridge_of("bo", fleet_a, spool_dir).call("fleet_history", {})
    assert incident.told_at is None
    workers.drain_spool()  # the bridge spooled incident.told with the note
    incident.refresh_from_db()
    assert incident.told_at is not None
    assert "yours" not in tools.fleet_status(bridge_of("ada", fleet_a, spool_dir))

    briefing = (spool_dir.parent / "cache" / "fleet-a" / "briefing.md").read_text()
    assert "## Incidents (last 24 h)" in briefing
    assert "ada edited src/payments/stripe.py inside bo's lease" in briefing

    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    mod.user_permissions.add(Permission.objects.get(codename="view_incident"))
    client = Client()
    client.force_login(mod)
    page = client.get("/admin/fleet/incident/", {"kind__exact": "edit_in_lease"})
    assert page.status_code == 200 and "src/payments/stripe.py" in page.content.decode()
    assert client.get(f"/admin/fleet/incident/{incident.pk}/change/").status_code == 200
    assert client.post(f"/admin/fleet/incident/{incident.pk}/delete/").status_code == 403

    listed = api_as(fleet_a, "integration").get("/api/v1/fleets/fleet-a/incidents")
    assert listed.status_code == 200
    [row] = listed.json()["results"]
    assert (row["id"], row["kind"], row["actor"]["agent_id"], row["holder"]["agent_id"]) == (
        f"i-{incident.pk}", "edit_in_lease", "ada", "bo")


def test_the_api_lists_only_the_callers_fleet_and_filters_by_kind(
    fleet_a: Fleet, ada: Agent, bo: Agent, cy: Agent, api_as: ApiAs,
) -> None:
    incidents.record_incident(fleet_a, "edit_in_lease", actor=ada, holder=bo, paths=["a.py"])
    incidents.record_incident(cy.fleet, "agent_retired", actor=cy)
    client = api_as(fleet_a, "operator")
    assert [r["kind"] for r in client.get("/api/v1/fleets/fleet-a/incidents").json()[
        "results"]] == ["edit_in_lease"]
    assert client.get("/api/v1/fleets/fleet-a/incidents?kind=agent_retired").json()[
        "results"] == []
    assert client.get("/api/v1/fleets/fleet-a/incidents?kind=nope").status_code == 400
    assert client.get(f"/api/v1/fleets/{cy.fleet.slug}/incidents").status_code == 404


def test_a_refused_pickup_is_an_incident_naming_the_handoffs_holder(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path,
) -> None:
    note = Handoff(fleet=fleet_a, from_agent=ada, summary="refunds half done",
                   source_trust=Handoff.SourceTrust.AGENT)
    ((handoff, _),) = actions.create_handoffs(fleet_a, [(note, None)])
    ref = events.handoff_ref(handoff.pk)
    Spool(spool_dir, fleet="fleet-a", agent="bo", session="bo-s1").append(
        events.KIND_HANDOFF_PICKUP, {"handoff": ref, "version": 1})  # no confirm: the gate
    drain_and_render(fleet_a)

    [incident] = Incident.objects.all()
    assert (incident.kind, incident.actor, incident.holder) == ("pickup_refused", bo, ada)
    assert incident.detail.startswith(f"{ref}: This handoff was written with source trust")
    [told] = tools.fleet_status(bridge_of("ada", fleet_a, spool_dir))["yours"]["incidents"]
    assert told["text"].startswith("bo's pickup was refused")


def test_an_overlap_that_lasts_is_one_incident_per_pair(
    fleet_a: Fleet, ada: Agent, bo: Agent,
) -> None:
    holds(ada, "src/payments/**", ago=timedelta(minutes=40))
    theirs = holds(bo, "src/payments/api.py", ago=timedelta(minutes=5))
    assert incidents.scan_overlaps(timezone.now()) == []  # 5 minutes: not yet

    with time_machine.travel(timezone.now() + incidents.OVERLAP_PATIENCE):
        [found] = incidents.scan_overlaps(timezone.now())
        assert incidents.scan_overlaps(timezone.now()) == []  # once per pair
        assert workers.incidents_task().startswith("0 new overlap incident(s)")
    assert (found.kind, found.actor, found.holder, found.paths) == (
        "overlap_persisted", bo, ada, ["src/payments/api.py", "src/payments/**"])
    assert found.key == f"overlap:{Lease.objects.get(agent=ada).pk}:{theirs.pk}"


def test_a_retirement_is_an_incident_naming_what_was_released(
    fleet_a: Fleet, ada: Agent,
) -> None:
    fleet_a.retire_idle_hours = 1
    fleet_a.save()
    leases.claim_paths(ada, ["src/payments/**"], ttl=timedelta(hours=8))
    ada.last_seen_at = timezone.now() - timedelta(hours=2)
    ada.save()
    retirement.retire_idle_agents(timezone.now())
    [incident] = Incident.objects.all()
    assert (incident.kind, incident.actor, incident.holder, incident.paths) == (
        "agent_retired", ada, None, ["src/payments/**"])
    assert retirement.retire_idle_agents(timezone.now()) == [] and Incident.objects.count() == 1


def test_an_incident_detail_is_scrubbed_cleaned_and_bounded(
    fleet_a: Fleet, ada: Agent, bo: Agent,
) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    detail = f"token {secret} \x00\u202e{'x' * 5000}"
    incident = incidents.record_incident(fleet_a, "pickup_refused", actor=ada, holder=bo,
                                         detail=detail)
    incident.refresh_from_db()
    assert secret not in incident.detail and "\x00" not in incident.detail
    assert "\u202e" not in incident.detail
    assert len(incident.detail) <= events.INCIDENT_DETAIL_MAX_CHARS


def test_the_schedule_includes_the_incident_job(fleet_a: Fleet) -> None:
    from django_q.models import Schedule

    assert "ctxlake.incidents" in workers.ensure_schedules()
    assert Schedule.objects.get(name="ctxlake.incidents").func == \
        "ctxlake_site.workers.incidents_task"
