"""The same change made over REST and through the spool leaves the same traces.

fleet.actions is the one write path: rows, activity (the audit), staleness marks on the
claims citing the files, and a render of the fleet's cache requested on commit.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from claims.models import Claim
from ctxlake_site import workers
from fleet.models import Activity, Agent, Fleet, Handoff, Lease, Session
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import Spool
from tests.claims.searchdata import promoted
from tests.fleet.conftest import ApiAs

CITED = [{"text": "refunds.py retries Stripe three times", "subject": "payments",
          "paths": ["src/payments/refunds.py"]},
         {"text": "the README badge points at the old CI", "subject": "docs",
          "paths": ["README.md"]}]


def _traces(fleet: Fleet) -> dict[str, Any]:
    return {
        "leases": sorted((ls.agent.agent_id, ls.path, ls.reason, ls.released_at is None)
                         for ls in Lease.objects.filter(fleet=fleet)),
        "handoffs": sorted((h.summary, h.status, h.next_steps, h.source_trust, h.state)
                           for h in Handoff.objects.filter(fleet=fleet)),
        "sessions": sorted((s.session_id, s.outcome, s.summary, s.ended_at is not None)
                           for s in Session.objects.filter(fleet=fleet)),
        "activity": Counter(  # the REST side's token is the test's set-up, not the change
            Activity.objects.filter(fleet=fleet).exclude(verb="token.issued")
            .values_list("verb", flat=True)),
        "stale": sorted((c.text, c.staleness) for c in Claim.objects.filter(fleet=fleet)),
    }


def _renders_requested(callbacks: list[Any], fleet: Fleet) -> int:
    return sum(getattr(c, "ctxlake_key", None) == f"render:{fleet.pk}" for c in callbacks)


def test_rest_and_spool_writes_of_one_change_leave_the_same_traces(
    fleet_a: Fleet, fleet_b: Fleet, api_as: ApiAs, spool_dir: Path,
    django_capture_on_commit_callbacks: Any,
) -> None:
    ada_a = Agent.objects.create(fleet=fleet_a, agent_id="ada")
    ada_b = Agent.objects.create(fleet=fleet_b, agent_id="ada")
    promoted(fleet_a, CITED)
    promoted(fleet_b, CITED)
    Session.objects.create(fleet=fleet_a, agent=ada_a, session_id="s-1",
                           started_at=timezone.now())
    Session.objects.create(fleet=fleet_b, agent=ada_b, session_id="s-1",
                           started_at=timezone.now())

    rest = api_as(ada_a)
    base = f"/api/v1/fleets/{fleet_a.slug}"
    with django_capture_on_commit_callbacks() as over_rest:
        for url, body in [
            ("leases/claim", {"paths": ["src/payments/**"], "reason": "refunds", "ttl_secs": 600,
                              "session_id": "s-1"}),
            ("handoffs", {"summary": "refunds half done", "status": "blocked",
                          "next_steps": "tests", "session_id": "s-1"}),
            ("leases/release", {"paths": ["src/payments/**"]}),
            ("sessions/s-1/end", {"outcome": "success", "summary": "done",
                                  "changed_paths": ["README.md"]}),
        ]:
            response = rest.post(f"{base}/{url}", body, format="json")
            assert response.status_code in (200, 201), (url, response.content)

    spool = Spool(spool_dir, fleet=fleet_b.slug, agent="ada", session="s-1")
    spool.append("lease.claim", {"paths": ["src/payments/**"], "reason": "refunds",
                                 "ttl_secs": 600})
    spool.append("handoff.create", {"summary": "refunds half done", "status": "blocked",
                                    "next": "tests"})
    spool.append("lease.release", {"paths": ["src/payments/**"]})
    spool.append("session.end", {"outcome": "success", "summary": "done",
                                 "changed_paths": ["README.md"]})
    with django_capture_on_commit_callbacks() as over_spool:
        assert workers.drain_spool(fleet_b.slug).applied == 4

    over_rest_traces, over_spool_traces = _traces(fleet_a), _traces(fleet_b)
    assert over_rest_traces == over_spool_traces
    assert [s for _, s in over_rest_traces["stale"]] == [0.5, 0.5]  # both files' claims
    assert over_rest_traces["activity"]["claim.possibly_stale"] == 2
    assert _renders_requested(over_rest, fleet_a) >= 1
    assert _renders_requested(over_spool, fleet_b) >= 1


def _handoff_traces(fleet: Fleet) -> dict[str, Any]:
    return {
        "handoffs": sorted((h.summary, h.state, h.version, h.picked_up_by.agent_id
                            if h.picked_up_by else None, h.picked_up_session is not None)
                           for h in Handoff.objects.filter(fleet=fleet)),
        "leases": sorted((ls.agent.agent_id, ls.path, ls.released_at is None)
                         for ls in Lease.objects.filter(fleet=fleet)),
        "activity": Counter(Activity.objects.filter(fleet=fleet).exclude(verb="token.issued")
                            .values_list("verb", flat=True)),
    }


def _two_handoffs(fleet: Fleet) -> list[Handoff]:
    """ada's two notes, the first offering her lease on src/payments/**. Rows made directly:
    a render requested here would absorb (on_commit_once) the one the change must ask for."""
    ada = Agent.objects.create(fleet=fleet, agent_id="ada")
    Agent.objects.create(fleet=fleet, agent_id="bo")
    notes = [Handoff.objects.create(fleet=fleet, from_agent=ada, summary=text, status="blocked")
             for text in ("take refunds", "stale note")]
    Lease.objects.create(fleet=fleet, agent=ada, path="src/payments/**", reason="refunds",
                         expires_at=timezone.now() + timedelta(hours=1), offered_with=notes[0])
    return notes


def test_rest_and_spool_pickups_and_clears_leave_the_same_traces(
    fleet_a: Fleet, fleet_b: Fleet, api_as: ApiAs, spool_dir: Path,
    django_capture_on_commit_callbacks: Any,
) -> None:
    take_a, stale_a = _two_handoffs(fleet_a)
    take_b, stale_b = _two_handoffs(fleet_b)
    Session.objects.create(fleet=fleet_a, agent=Agent.objects.get(fleet=fleet_a, agent_id="bo"),
                           session_id="s-2", started_at=timezone.now())

    rest = api_as(Agent.objects.get(fleet=fleet_a, agent_id="bo"))
    base = f"/api/v1/fleets/{fleet_a.slug}/handoffs"
    with django_capture_on_commit_callbacks() as over_rest:
        picked = rest.post(f"{base}/{take_a.pk}/pickup",
                           {"version": 1, "confirm": True, "session_id": "s-2"}, format="json")
        cleared = rest.post(f"{base}/{stale_a.pk}/clear", {"version": 1}, format="json")
    assert (picked.status_code, cleared.status_code) == (200, 200), picked.content

    spool = Spool(spool_dir, fleet=fleet_b.slug, agent="bo", session="s-2")
    spool.append("handoff.pickup", {"handoff": events.handoff_ref(take_b.pk), "version": 1,
                                    "confirm": True})
    spool.append("handoff.clear", {"handoff": events.handoff_ref(stale_b.pk), "version": 1})
    with django_capture_on_commit_callbacks() as over_spool:
        assert workers.drain_spool(fleet_b.slug).applied == 2

    assert _handoff_traces(fleet_a) == _handoff_traces(fleet_b)
    assert _handoff_traces(fleet_a)["leases"] == [("ada", "src/payments/**", False),
                                                  ("bo", "src/payments/**", True)]
    assert _renders_requested(over_rest, fleet_a) >= 1
    assert _renders_requested(over_spool, fleet_b) >= 1


def test_a_claim_naming_no_ttl_gets_the_fleet_default_through_either_door(
    fleet_a: Fleet, fleet_b: Fleet, api_as: ApiAs, spool_dir: Path, tmp_path: Path,
) -> None:
    """One default TTL: the bridge's fleet_claim without ttl_secs and a REST claim without
    one both last the fleet's default_lease_ttl_secs (the bridge used to send 1,800 s)."""
    from mcp_bridge import tools
    from mcp_bridge.config import Config

    for fleet in (fleet_a, fleet_b):
        fleet.default_lease_ttl_secs = 600
        fleet.save()
    ada_a = Agent.objects.create(fleet=fleet_a, agent_id="ada")
    ada_b = Agent.objects.create(fleet=fleet_b, agent_id="ada")
    cfg = Config.from_env({"CTXLAKE_HOME": str(tmp_path / "home"),
                           "CTXLAKE_SPOOL_DIR": str(spool_dir), "CTXLAKE_FLEET_ID": "fleet-a",
                           "CTXLAKE_AGENT_ID": "ada", "CTXLAKE_SESSION_ID": "s-ttl"})
    tools.Bridge.from_config(cfg).call("fleet_claim", {"paths": ["src/**"], "reason": "r"})
    workers.drain_spool("fleet-a")
    rest = api_as(ada_b).post("/api/v1/fleets/fleet-b/leases/claim",
                              {"paths": ["src/**"], "reason": "r"}, format="json")
    assert rest.status_code in (200, 201), rest.content
    for agent in (ada_a, ada_b):
        lease = Lease.objects.get(agent=agent)
        assert lease.expires_at - lease.acquired_at == timedelta(seconds=600), agent.fleet
