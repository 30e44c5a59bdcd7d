"""Idle agents are retired: leases released, one Activity row, back on their next write."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from django.utils import timezone

from ctxlake_site import workers
from fleet import leases, retirement
from fleet.models import RETIRE_IDLE_HOURS_MAX, Activity, Agent, Fleet, Lease
from mcp_bridge.contract.spool import Spool


def _seen(agent: Agent, hours_ago: float) -> None:
    agent.last_seen_at = timezone.now() - timedelta(hours=hours_ago)
    agent.save()


def test_an_idle_agent_is_retired_its_leases_released_once(
    fleet_a: Fleet, ada: Agent, bo: Agent
) -> None:
    fleet_a.retire_idle_hours = 2
    fleet_a.save()
    leases.claim_paths(ada, ["src/payments/**"], ttl=timedelta(hours=8))
    leases.claim_paths(bo, ["docs/**"], ttl=timedelta(hours=8))
    _seen(ada, 3)
    _seen(bo, 0.5)

    retired = retirement.retire_idle_agents(timezone.now())

    assert [a.agent_id for a in retired] == ["ada"]
    assert not Lease.objects.active().filter(agent=ada).exists()
    assert Lease.objects.active().filter(agent=bo).count() == 1
    row = Activity.objects.get(verb="agent.retired")
    assert (row.agent, row.data["released"], row.data["window_hours"]) == (
        ada, ["src/payments/**"], 2)
    assert retirement.retire_idle_agents(timezone.now()) == []  # once


def test_a_fleet_with_no_window_retires_nobody(fleet_a: Fleet, ada: Agent) -> None:
    fleet_a.retire_idle_hours = 0
    fleet_a.save()
    _seen(ada, 24 * 400)
    assert retirement.retire_idle_agents(timezone.now()) == []


def test_a_retired_agent_is_back_on_its_next_write(
    fleet_a: Fleet, ada: Agent, spool_dir: Path
) -> None:
    fleet_a.retire_idle_hours = 1
    fleet_a.save()
    _seen(ada, 2)
    retirement.retire_idle_agents(timezone.now())
    assert Agent.objects.get(pk=ada.pk).retired_at is not None
    Spool(spool_dir, fleet="fleet-a", agent="ada", session="s-back").append(
        "lease.claim", {"paths": ["src/**"], "reason": "back at it"})
    workers.drain_spool("fleet-a")
    assert Agent.objects.get(pk=ada.pk).retired_at is None


@pytest.mark.parametrize("hours", [-1, RETIRE_IDLE_HOURS_MAX + 1, 10**20])
def test_the_window_is_validated_and_constrained(fleet_a: Fleet, hours: int) -> None:
    fleet_a.retire_idle_hours = hours
    with pytest.raises(ValidationError):
        fleet_a.full_clean()
    with pytest.raises(DatabaseError), transaction.atomic():
        Fleet.objects.filter(pk=fleet_a.pk).update(retire_idle_hours=hours)
