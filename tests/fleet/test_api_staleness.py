"""REST reports of changing files mark the claims citing them possibly stale, as the
spool does: fleet announces them (fleet.signals), the claims app listens."""

from __future__ import annotations

from claims.models import Claim
from fleet.models import Activity, Agent, Fleet, Session
from tests.claims.searchdata import promoted
from tests.fleet.conftest import ApiAs

CITED = [
    {"text": "refunds.py retries Stripe three times", "subject": "payments",
     "paths": ["src/payments/refunds.py"]},
    {"text": "the README badge points at the old CI", "subject": "docs",
     "paths": ["README.md"]},
]


def _staleness(*claims: Claim) -> list[float]:
    return [Claim.objects.get(pk=c.pk).staleness for c in claims]


def test_a_rest_lease_claim_marks_claims_citing_covered_files(
    fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    refunds, readme = promoted(fleet_a, CITED)
    response = api_as(ada).post(
        f"/api/v1/fleets/{fleet_a.slug}/leases/claim", {"paths": ["src/payments/**"]},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert _staleness(refunds, readme) == [0.5, 0.0]
    row = Activity.objects.get(verb="claim.possibly_stale")
    assert row.data["source"] == "lease.claim" and row.agent == ada


def test_a_rest_session_end_naming_changed_files_marks_their_claims(
    fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    refunds, readme = promoted(fleet_a, CITED)
    Session.objects.create(fleet=fleet_a, agent=ada, session_id="s-9")
    response = api_as(ada).post(
        f"/api/v1/fleets/{fleet_a.slug}/sessions/s-9/end",
        {"outcome": "success", "changed_paths": ["./README.md"]}, format="json",
    )
    assert response.status_code == 200, response.content
    assert _staleness(refunds, readme) == [0.0, 0.5]
    row = Activity.objects.get(verb="claim.possibly_stale")
    assert row.data == {
        "claim": readme.public_id, "paths": ["README.md"], "source": "session.end",
        "session": "s-9",
    }


def test_a_session_end_with_bad_changed_paths_is_refused_and_changes_nothing(
    fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    (refunds,) = promoted(fleet_a, CITED[:1])
    Session.objects.create(fleet=fleet_a, agent=ada, session_id="s-9")
    for bad in (["/etc/passwd"], ["../up"], "src/a.py", [""], ["a\x00b"], [["nested"]]):
        response = api_as(ada).post(
            f"/api/v1/fleets/{fleet_a.slug}/sessions/s-9/end",
            {"outcome": "success", "changed_paths": bad}, format="json",
        )
        assert response.status_code == 400, (bad, response.content)
        assert "changed_paths" in response.json()
    assert Session.objects.get(session_id="s-9").ended_at is None
    assert _staleness(refunds) == [0.0]
