"""The per-agent cap on live leases, at the domain function and the REST front door.

(The spool front door — bridge → drain → render → fleet_status — is in
tests/site/test_lease_cap_drain.py.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from fleet import leases
from fleet.models import Activity, Agent, Lease
from tests.fleet.conftest import ApiAs


@pytest.fixture
def cap3(settings: Any) -> int:
    settings.CTXLAKE_MAX_LIVE_LEASES_PER_AGENT = 3
    return 3


def _held(agent: Agent) -> list[str]:
    return sorted(Lease.objects.active().filter(agent=agent).values_list("path", flat=True))


def test_the_default_cap_is_set_once_in_settings(settings: Any) -> None:
    assert leases.live_lease_cap() == settings.CTXLAKE_MAX_LIVE_LEASES_PER_AGENT == 500


def test_a_claim_past_the_cap_is_refused_whole_and_says_why(cap3: int, ada: Agent) -> None:
    leases.claim_paths(ada, ["a.py", "b.py"])
    with pytest.raises(leases.LeaseCapReached) as refused:
        leases.claim_paths(ada, ["c.py", "d.py"])  # 2 + 2 > 3: neither is taken
    assert (refused.value.live, refused.value.adding, refused.value.cap) == (2, 2, 3)
    assert "CTXLAKE_MAX_LIVE_LEASES_PER_AGENT" in str(refused.value)
    assert "ada holds 2 live lease(s)" in str(refused.value)
    assert _held(ada) == ["a.py", "b.py"]
    row = Activity.objects.get(verb=leases.REFUSED)
    assert (row.agent, row.data) == (ada, {"paths": ["c.py", "d.py"], "live": 2, "cap": 3})
    leases.claim_paths(ada, ["c.py"])  # up to the cap is fine
    assert _held(ada) == ["a.py", "b.py", "c.py"]


def test_renewing_held_paths_is_never_refused_even_at_the_cap(cap3: int, ada: Agent) -> None:
    leases.claim_paths(ada, ["a.py", "b.py", "c.py"])
    renewed = leases.claim_paths(ada, ["./a.py", "c.py"], ttl=timedelta(hours=2))
    assert [lease.path for lease in renewed.held] == ["a.py", "c.py"]
    with pytest.raises(leases.LeaseCapReached):
        leases.claim_paths(ada, ["a.py", "z.py"])  # one new path past the cap: all refused
    assert Lease.objects.get(agent=ada, path="a.py").expires_at == renewed.held[0].expires_at


def test_the_cap_counts_one_agent_only_and_live_leases_only(
    cap3: int, ada: Agent, bo: Agent
) -> None:
    leases.claim_paths(ada, ["a.py", "b.py", "c.py"], ttl=timedelta(minutes=5))
    leases.claim_paths(bo, ["a.py", "b.py", "c.py"])  # bo has a cap of its own
    leases.release_paths(ada, ["a.py"])
    leases.claim_paths(ada, ["d.py"])  # released leases do not count
    with time_machine.travel(timezone.now() + timedelta(minutes=10)):
        # b.py and c.py expired (not yet released by the expiry job): they do not count,
        # and claiming one again makes it live again
        leases.claim_paths(ada, ["b.py", "e.py"])
        assert _held(ada) == ["b.py", "d.py", "e.py"]


def test_claims_applied_together_are_decided_in_order_as_one_by_one(
    cap3: int, ada: Agent, bo: Agent
) -> None:
    leases.claim_paths(ada, ["z.py"])
    now = timezone.now()
    results = leases.claim_many(  # (one agent never names a path twice in one call)
        ada.fleet_id,
        [
            leases.ClaimRequest(ada, ["a.py", "b.py"], now=now),  # 1 + 2 = 3
            leases.ClaimRequest(bo, ["a.py"], now=now),
            leases.ClaimRequest(ada, ["c.py", "d.py"], now=now),  # 3 + 2 > 3
            leases.ClaimRequest(ada, ["z.py"], now=now),  # a renewal
            leases.ClaimRequest(ada, ["e.py"], now=now),  # 3 + 1 > 3
        ],
    )
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["ClaimResult", "ClaimResult", "LeaseCapReached", "ClaimResult",
                     "LeaseCapReached"]
    assert [(r.live, r.adding) for r in results if isinstance(r, leases.LeaseCapReached)] == [
        (3, 2),
        (3, 1),
    ]
    assert _held(ada) == ["a.py", "b.py", "z.py"]
    assert [c.theirs.agent for c in results[1].contention] == [ada]  # type: ignore[union-attr]


def test_rest_claim_past_the_cap_is_409_with_the_reason(
    cap3: int, api_as: ApiAs, ada: Agent
) -> None:
    client = api_as(ada)
    url = f"/api/v1/fleets/{ada.fleet.slug}/leases/claim"
    ok = client.post(url, {"paths": ["a.py", "b.py", "c.py"], "reason": "r"}, format="json")
    assert ok.status_code == 200
    refused = client.post(url, {"paths": ["d.py"], "reason": "r"}, format="json")
    assert refused.status_code == 409
    body = refused.json()
    assert (body["live"], body["cap"]) == (3, 3)
    assert "past the cap of 3 per agent" in body["detail"]
    assert _held(ada) == ["a.py", "b.py", "c.py"]
    renew = client.post(url, {"paths": ["a.py"], "reason": "again"}, format="json")
    assert renew.status_code == 200


def test_an_operator_token_hits_the_same_cap(cap3: int, api_as: ApiAs, ada: Agent) -> None:
    client = api_as(ada.fleet, "operator")
    url = f"/api/v1/fleets/{ada.fleet.slug}/leases/claim"
    body = {"agent_id": "ada", "paths": ["a", "b", "c", "d"], "reason": "r"}
    assert client.post(url, body, format="json").status_code == 409
    assert _held(ada) == []
