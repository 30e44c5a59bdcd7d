"""Memory health's bulk actions over plain HTTP: each goes through claims.moderation, and
the ones that must say why refuse without a note and change nothing."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from claims import moderation, usefulness
from claims.models import Claim
from fleet.models import Agent, Fleet, FleetModerator
from tests.claims.witness import seen_cited

CITE = [{"session_id": "s1", "message_id": "m1", "path": "src/a.py"}]


@pytest.fixture
def flagged(fleet_a: Fleet, ada: Agent, mod: User) -> Claim:
    """A promoted claim an agent has flagged wrong: listed on memory health."""
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    seen_cited(fleet_a, CITE)
    claim = moderation.propose_claim(fleet_a, text="Refunds are retried three times.",
                                     type="fact", subject="refunds", evidence=CITE).claim
    claim = moderation.promote_claim(claim, by=mod)
    usefulness.file_feedback(fleet_a, claim.public_id, agent=ada, session=None,
                             verdict="wrong", note="five times since v2")
    return claim


def _post(client: Client, fleet: Fleet, claim: Claim, action: str, note: str) -> str:
    url = reverse("admin:claims_claim_health") + f"?fleet={fleet.slug}"
    response = client.post(url, {"action": action, "claims": [claim.pk], "note": note},
                           follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_send_back_takes_the_claim_back_to_the_review_queue(
        client: Client, mod: User, fleet_a: Fleet, flagged: Claim) -> None:
    client.force_login(mod)
    page = _post(client, fleet_a, flagged, "send_back", "")
    assert "need a note" in page
    assert Claim.objects.get(pk=flagged.pk).status == "promoted"

    page = _post(client, fleet_a, flagged, "send_back", "agents say five times")
    assert "Send back for review: 1 claim(s)" in page
    claim = Claim.objects.get(pk=flagged.pk)
    assert claim.status == "proposed"
    assert claim.events.filter(kind="sent_back", note="agents say five times").exists()
