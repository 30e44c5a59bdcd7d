"""The same change made over REST and through the spool leaves the same traces.

fleet.actions is the one write path: rows, activity (the audit), staleness marks on the
claims citing the files, and a render of the fleet's cache requested on commit.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from django.utils import timezone

from claims.models import Claim
from ctxlake_site import workers
from fleet.models import Activity, Agent, Fleet, Handoff, Lease, Session
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
