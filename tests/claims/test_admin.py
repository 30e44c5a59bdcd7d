"""The review queue and the review page, through the Django test client."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from claims import moderation
from claims.models import Claim
from fleet.models import Agent, Fleet, FleetModerator

QUEUE = "/admin/claims/claim/review/"


def _propose(fleet: Fleet, agent: Agent | None = None, **kw: Any) -> Claim:
    args = {
        "text": "pytest -x stops at the first failure",
        "type": "fact",
        "subject": "pytest",
        "evidence": [{"session_id": "s1", "message_id": "m1", "path": "src/a.py"}],
        **kw,
    }
    return moderation.propose_claim(fleet, by_agent=agent, **args).claim


@pytest.fixture(autouse=True)
def plain_static(settings: Any) -> None:
    """Admin pages without collectstatic: the manifest storage needs a collected manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def fleet_mod(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


@pytest.fixture
def as_mod(client: Client, fleet_mod: User) -> Client:
    client.force_login(fleet_mod)
    return client


def test_it_smokes(as_mod: Client, fleet_a: Fleet, ada: Agent) -> None:
    claim = _propose(fleet_a, ada)
    r = as_mod.get(QUEUE)
    assert r.status_code == 200, r.content[:2000]
    assert claim.public_id in r.content.decode()
    r = as_mod.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    assert r.status_code == 200
    r = as_mod.get("/admin/claims/claim/")
    assert r.status_code == 200
