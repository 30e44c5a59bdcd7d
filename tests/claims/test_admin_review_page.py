"""What the review page and the admin index show a moderator (issue 13, part 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from claims import moderation
from claims.models import Claim
from fleet import api_presence, handoffs
from fleet.models import Agent, Fleet, FleetModerator, Lease
from tests.claims.witness import seen


@pytest.fixture
def as_mod(mod: User, fleet_a: Fleet) -> Client:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    client = Client()
    client.force_login(mod)
    return client


def _claim(fleet: Fleet, agent: Agent, text: str = "pytest -x stops early", **cite: str) -> Claim:
    evidence = [{"session_id": "sess-real", "message_id": "m1", **cite}]
    evidence.append({"session_id": "sess-typed", "message_id": "m2"})
    return moderation.propose_claim(
        fleet, text=text, type="fact", subject="pytest", evidence=evidence, by_agent=agent
    ).claim


def _page(client: Client, claim: Claim) -> str:
    response = client.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    assert response.status_code == 200
    return response.content.decode()


def test_evidence_shows_verified_sessions_with_their_outcome_and_links_the_file(
    as_mod: Client, fleet_a: Fleet, ada: Agent
) -> None:
    session, _ = api_presence.start_session(ada, "sess-real")
    api_presence.end_session(session, outcome="success", summary="fixed the flaky refund test")
    fleet_a.repo_url_template = "https://git.example.com/acme/{repo}/blob/{commit}/{path}"
    fleet_a.save()
    claim = _claim(
        fleet_a, ada, repo="git@example.com:acme/shop.git", path="src/a b.py", commit="9f2c1ab"
    )
    page = _page(as_mod, claim)
    assert "✓ verified" in page and "unverified" in page
    assert "1 citation unverified, not counted" in page
    assert "success" in page and "fixed the flaky refund test" in page
    assert 'href="https://git.example.com/acme/shop/blob/9f2c1ab/src/a%20b.py"' in page
    claim.refresh_from_db()
    assert claim.independent_sessions == 1


@pytest.mark.parametrize(
    "template", ["", "javascript:alert(1)//{path}", "https://x.example/{nope}/{path}"]
)
def test_a_file_is_only_linked_by_a_valid_http_template(
    as_mod: Client, fleet_a: Fleet, ada: Agent, template: str
) -> None:
    fleet_a.repo_url_template = template
    fleet_a.save()
    seen(fleet_a, "sess-real", agent=ada)
    page = _page(as_mod, _claim(fleet_a, ada, path="src/a.py", commit="abc"))
    assert "src/a.py@abc" in page
    assert "javascript:" not in page.split('id="evidence"')[1]
    assert 'href="https://x.example' not in page


def test_the_index_names_ctxlake_and_opens_with_the_queue_count(
    as_mod: Client, fleet_a: Fleet, fleet_b: Fleet, ada: Agent, cy: Agent
) -> None:
    _claim(fleet_a, ada)
    _claim(fleet_a, ada, text="another one")
    _claim(fleet_b, cy)  # not this moderator's
    page = as_mod.get(reverse("admin:index")).content.decode()
    assert "Review queue (2 waiting)" in page
    assert "<title>" in page and "Django administration" not in page
    assert 'id="site-name"' in page and ">ctxlake<" in page


def test_a_proposed_claim_offers_reject_but_no_retract_and_a_promoted_one_tucks_retract_away(
    as_mod: Client, fleet_a: Fleet, ada: Agent, mod: User
) -> None:
    seen(fleet_a, "sess-real", agent=ada)
    claim = _claim(fleet_a, ada)
    page = _page(as_mod, claim)
    assert 'id="reject-form"' in page and 'id="retract-form"' not in page
    moderation.promote_claim(claim, by=mod)
    page = _page(as_mod, claim)
    assert 'id="reject-form"' not in page
    assert '<details class="cl-danger" id="retract-zone">' in page


def test_contested_is_a_neutral_flag_in_the_list(
    as_mod: Client, fleet_a: Fleet, ada: Agent, mod: User
) -> None:
    seen(fleet_a, "sess-real", agent=ada)
    claim = moderation.promote_claim(_claim(fleet_a, ada), by=mod)
    moderation.contest_claim(claim, by=mod, note="flaky")
    _claim(fleet_a, ada, text="not contested")
    page = as_mod.get(reverse("admin:claims_claim_changelist")).content.decode()
    assert page.count("⚑ contested") == 1
    assert "icon-no.svg" not in page and "icon-yes.svg" not in page


def test_keyboard_triage_posts_get_json_answers(as_mod: Client, fleet_a: Fleet, ada: Agent) -> None:
    seen(fleet_a, "sess-real", agent=ada)
    claim = _claim(fleet_a, ada)
    url = reverse("admin:claims_claim_moderate", args=(claim.pk, "reject"))
    refused = as_mod.post(url, {"triage": "1", "reason": ""}).json()
    assert refused["ok"] is False and "reason" in refused["messages"][0]
    done = as_mod.post(url, {"triage": "1", "reason": "wrong"}).json()
    assert done == {"ok": True, "messages": [f"Rejected {claim.public_id}."]}
    again = as_mod.post(url, {"triage": "1", "reason": "wrong"}).json()
    assert again["ok"] is False and "got there first" in again["messages"][0]


def test_the_queue_labels_duplicates_and_conflicts(
    as_mod: Client, fleet_a: Fleet, ada: Agent
) -> None:
    seen(fleet_a, "sess-real", agent=ada)
    first = _claim(fleet_a, ada)
    again = moderation.propose_claim(
        fleet_a,
        text="PYTEST -x stops early",
        type="fact",
        subject="pytest",
        evidence=[{"session_id": "sess-real", "message_id": "m-again"}],
    ).claim
    page = as_mod.get(reverse("admin:claims_claim_review")).content.decode()
    assert f"likely duplicate of {first.public_id} (1.00)" in page
    assert again.near_claim == first


def test_leases_show_live_or_expired_and_who_overlaps(
    mod: User, fleet_a: Fleet, ada: Agent, bo: Agent
) -> None:
    mod.is_superuser = True
    mod.save()
    client = Client()
    client.force_login(mod)
    now = timezone.now()
    Lease.objects.create(
        fleet=fleet_a, agent=ada, path="src/payments/**", expires_at=now + timedelta(hours=1)
    )
    Lease.objects.create(
        fleet=fleet_a, agent=bo, path="src/payments/refunds.py", expires_at=now + timedelta(hours=1)
    )
    Lease.objects.create(
        fleet=fleet_a,
        agent=bo,
        path="docs/**",
        acquired_at=now - timedelta(hours=2),
        expires_at=now - timedelta(hours=1),
    )
    url = reverse("admin:fleet_lease_changelist")
    page = client.get(url).content.decode()
    assert page.count("⚠ overlaps") == 2
    assert "⚠ overlaps bo" in page and "⚠ overlaps ada" in page
    live = client.get(url, {"state": "live"}).context["cl"].result_list
    expired = client.get(url, {"state": "expired"}).context["cl"].result_list
    assert {lease.path for lease in live} == {"src/payments/**", "src/payments/refunds.py"}
    assert [lease.path for lease in expired] == ["docs/**"]


def test_handoffs_list_their_summary_and_next_steps(mod: User, fleet_a: Fleet, ada: Agent) -> None:
    mod.is_superuser = True
    mod.save()
    client = Client()
    client.force_login(mod)
    handoffs.create_handoff(ada, summary="Refunds half migrated", next_steps="finish refunds.py")
    page = client.get(reverse("admin:fleet_handoff_changelist")).content.decode()
    assert "Refunds half migrated" in page and "finish refunds.py" in page
