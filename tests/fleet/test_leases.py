from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import IntegrityError
from django.utils import timezone

from fleet import leases
from fleet.globs import BadPath
from fleet.models import Activity, Agent, Lease
from mcp_bridge.contract import events as ev


def test_it_holds_paths_and_reports_overlapping_holders(ada: Agent, bo: Agent) -> None:
    leases.claim_paths(bo, ["src/payments/stripe.py"], reason="webhooks")
    result = leases.claim_paths(ada, ["src/payments/**"], reason="refunds")
    assert [lease.path for lease in result.held] == ["src/payments/**"]
    assert [(c.mine.agent, c.theirs.agent) for c in result.contention] == [(ada, bo)]
    assert Lease.objects.active().count() == 2  # advisory: both hold


def test_it_renews_instead_of_duplicating_a_reclaimed_path(ada: Agent) -> None:
    first = leases.claim_paths(ada, ["a.py"], ttl=timedelta(minutes=5)).held[0]
    again = leases.claim_paths(ada, ["./a.py"], ttl=timedelta(hours=1)).held[0]
    assert again.pk == first.pk
    assert again.expires_at > first.expires_at
    assert Lease.objects.filter(agent=ada).count() == 1


def test_it_ignores_other_fleets_when_reporting_contention(ada: Agent, cy: Agent) -> None:
    leases.claim_paths(cy, ["src/**"])
    assert leases.claim_paths(ada, ["src/a.py"]).contention == []


def test_it_stops_counting_a_lease_once_its_ttl_runs_out(ada: Agent, bo: Agent) -> None:
    leases.claim_paths(bo, ["src/a.py"], ttl=timedelta(minutes=1))
    with time_machine.travel(timezone.now() + timedelta(minutes=2)):
        assert Lease.objects.active().count() == 0
        assert Lease.objects.expired().count() == 1
        assert leases.claim_paths(ada, ["src/a.py"]).contention == []
        assert leases.expire_leases() == 1
        assert leases.expire_leases() == 0  # idempotent
    expired = Lease.objects.get(agent=bo)
    assert expired.released_at == expired.expires_at


def test_it_releases_named_paths_and_says_which_were_not_held(ada: Agent) -> None:
    leases.claim_paths(ada, ["a.py", "b.py"])
    result = leases.release_paths(ada, ["a.py", "zzz.py"])
    assert [lease.path for lease in result.released] == ["a.py"]
    assert result.not_held == ["zzz.py"]
    assert list(Lease.objects.active().values_list("path", flat=True)) == ["b.py"]


def test_it_releases_everything_when_no_paths_are_named(ada: Agent, bo: Agent) -> None:
    leases.claim_paths(ada, ["a.py", "b.py"])
    leases.claim_paths(bo, ["a.py"])
    assert len(leases.release_paths(ada).released) == 2
    assert list(Lease.objects.active().values_list("agent__agent_id", flat=True)) == ["bo"]


def test_it_records_activity_for_claims_and_releases(ada: Agent) -> None:
    leases.claim_paths(ada, ["a.py"])
    leases.release_paths(ada)
    assert list(Activity.objects.order_by("at").values_list("verb", flat=True)) == [
        "lease.claimed",
        "lease.released",
    ]


@pytest.mark.parametrize("bad", [[], ["/abs"], ["../up"], ["ok.py", ""], ["p"] * 0])
def test_it_refuses_bad_path_lists(ada: Agent, bad: list[str]) -> None:
    with pytest.raises((BadPath, ValueError)):
        leases.claim_paths(ada, bad)
    assert not Lease.objects.exists()


def test_it_refuses_too_many_paths(ada: Agent) -> None:
    with pytest.raises(ValueError, match="between 1 and"):
        leases.claim_paths(ada, [f"f{i}.py" for i in range(leases.MAX_PATHS_PER_CLAIM + 1)])


def test_the_database_refuses_a_second_live_lease_for_one_key(ada: Agent) -> None:
    now = timezone.now()
    Lease.objects.create(fleet=ada.fleet, agent=ada, path="a.py", expires_at=now + timedelta(1))
    with pytest.raises(IntegrityError):
        Lease.objects.create(fleet=ada.fleet, agent=ada, path="a.py", expires_at=now + timedelta(1))


def test_the_database_allows_a_new_lease_after_release(ada: Agent) -> None:
    now = timezone.now()
    Lease.objects.create(
        fleet=ada.fleet,
        agent=ada,
        path="a.py",
        acquired_at=now,
        expires_at=now + timedelta(1),
        released_at=now,
    )
    Lease.objects.create(fleet=ada.fleet, agent=ada, path="a.py", expires_at=now + timedelta(1))


def test_it_caps_the_ttl_at_the_contracts_maximum(ada: Agent) -> None:
    lease = leases.claim_paths(ada, ["a.py"], ttl=timedelta(days=365)).held[0]
    assert lease.expires_at - lease.acquired_at == timedelta(seconds=ev.TTL_MAX_SECS)


def test_sql_wildcards_in_paths_are_taken_literally(ada: Agent, bo: Agent) -> None:
    leases.claim_paths(bo, ["src/a_b/**", "lib/100%/**"])
    assert leases.claim_paths(ada, ["src/aXb/x.py", "lib/1000/y.py"]).contention == []
    found = leases.claim_paths(ada, ["src/a_b/x.py", "lib/100%/y.py"]).contention
    assert sorted(c.theirs.path for c in found) == ["lib/100%/**", "src/a_b/**"]
