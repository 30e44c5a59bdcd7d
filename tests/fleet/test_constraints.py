"""Each rule the database enforces, broken on purpose: the database itself must refuse."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.models import Agent, Fleet, Handoff, Lease, Session


def _refused(model: type[Any], **fields: Any) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.create(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"slug": "x", "memory_mode": "maybe"},
        {"slug": ""},
        {"slug": "x", "default_lease_ttl_secs": 0},
        {"slug": "x", "default_lease_ttl_secs": 59},  # below the contract's TTL_MIN_SECS
        {"slug": "x", "default_lease_ttl_secs": 86_401},  # above its TTL_MAX_SECS
        {"slug": "x", "min_independent_sessions": 0},
    ],
)
def test_the_database_refuses_bad_fleets(db: None, fields: dict[str, Any]) -> None:
    _refused(Fleet, name="x", **fields)


def test_the_database_refuses_duplicate_slugs(fleet_a: Fleet) -> None:
    _refused(Fleet, slug=fleet_a.slug, name="again")


def test_the_database_refuses_blank_and_duplicate_agent_ids(ada: Agent) -> None:
    _refused(Agent, fleet=ada.fleet, agent_id="")
    _refused(Agent, fleet=ada.fleet, agent_id="ada")


def test_the_same_agent_id_may_exist_in_two_fleets(ada: Agent, fleet_b: Fleet) -> None:
    Agent.objects.create(fleet=fleet_b, agent_id="ada")


def test_the_database_refuses_bad_sessions(ada: Agent) -> None:
    now = timezone.now()
    base = {"fleet": ada.fleet, "agent": ada}
    _refused(Session, **base, session_id="")
    _refused(Session, **base, session_id="s", outcome="great")
    _refused(Session, **base, session_id="s", started_at=now, ended_at=now - timedelta(1))
    Session.objects.create(**base, session_id="s")
    _refused(Session, **base, session_id="s")


def test_the_database_refuses_bad_leases(ada: Agent) -> None:
    now = timezone.now()
    base = {"fleet": ada.fleet, "agent": ada, "acquired_at": now}
    _refused(Lease, **base, path="", expires_at=now + timedelta(1))
    _refused(Lease, **base, path="a", expires_at=now)
    _refused(Lease, **base, path="a", expires_at=now + timedelta(1), released_at=now - timedelta(1))


@pytest.mark.parametrize(
    "fields",
    [
        {"summary": ""},
        {"status": "whatever"},
        {"source_trust": "god"},
        {"state": "lost"},
        {"state": "picked_up"},  # a pickup without a time
        {"version": 0},
    ],
)
def test_the_database_refuses_bad_handoffs(ada: Agent, fields: dict[str, Any]) -> None:
    _refused(Handoff, **{"fleet": ada.fleet, "from_agent": ada, "summary": "s", **fields})


@pytest.mark.parametrize("ttl", ["59", "86401", "99999999999999999999", "-5"])
def test_create_fleet_refuses_a_lease_ttl_outside_the_contracts_limits(db: None, ttl: str) -> None:
    with pytest.raises(CommandError, match="default_lease_ttl_secs"):
        call_command("create_fleet", "ttl-fleet", "--lease-ttl", ttl)
    assert not Fleet.objects.filter(slug="ttl-fleet").exists()
