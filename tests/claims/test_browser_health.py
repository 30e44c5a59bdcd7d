"""Memory health and the review page's usefulness panel in a real headless Chromium.

A moderator sees an agent's "wrong" feedback on a promoted claim, dismisses it from the
claim's page (its confidence comes back), then on Memory health selects a flagged claim
and contests it in bulk; the claim is contested through the moderation function, with the
note. Same browser set-up as test_browser_review (Debian's chromium via Playwright).
"""

from __future__ import annotations

from typing import Any

import pytest

from claims import moderation, usefulness
from claims.models import Claim, ClaimFeedback
from fleet.models import Agent, Fleet, Session
from tests.claims.test_browser_review import ARTIFACTS, _login, _moderator, page

__all__ = ["page"]  # the fixture, re-used

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _promoted(fleet: Fleet, ada: Agent, bo: Agent, mod: Any, text: str, n: int) -> Claim:
    for agent in (ada, bo):
        Session.objects.get_or_create(fleet=fleet, agent=agent, session_id=f"{agent.agent_id}-{n}")
    claim = moderation.propose_claim(
        fleet, text=text, type="gotcha", subject="payments", by_agent=ada,
        evidence=[{"session_id": f"{a.agent_id}-{n}", "message_id": "m"} for a in (ada, bo)]).claim
    return moderation.promote_claim(claim, by=mod)


def test_a_moderator_resolves_feedback_and_contests_from_memory_health(
    page: Any, live_server: Any,
) -> None:
    fleet = Fleet.objects.create(slug="shop", name="Shop", memory_mode="live")
    ada = Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code")
    bo = Agent.objects.create(fleet=fleet, agent_id="bo", runtime="codex")
    mod = _moderator(fleet)
    claim = _promoted(fleet, ada, bo, mod, "The payments tests need STRIPE_API_BASE set.", 1)
    other = _promoted(fleet, ada, bo, mod, "Refunds are retried three times.", 2)
    derived = Claim.objects.get(pk=claim.pk).confidence
    usefulness.file_feedback(fleet, claim.public_id, agent=bo, session=None, verdict="wrong",
                             note="STRIPE_MOCK_URL since v2")
    usefulness.file_feedback(fleet, other.public_id, agent=bo, session=None,
                             verdict="outdated", note="now five times")
    assert Claim.objects.get(pk=claim.pk).confidence < derived
    ARTIFACTS.mkdir(exist_ok=True)

    _login(page, live_server, f"/admin/claims/claim/{claim.pk}/change/")
    page.wait_for_selector("#usefulness")
    assert "wrong" in page.inner_text("#feedback") and "STRIPE_MOCK_URL" in page.inner_text(
        "#feedback")
    assert "flagged wrong or outdated by 1 agent" in page.inner_text("#use-why")
    page.screenshot(path=str(ARTIFACTS / "review-usefulness.png"), full_page=True)
    page.click("#feedback button[value=dismissed]")
    page.wait_for_selector("ul.messagelist")
    assert "dismissed" in page.inner_text("ul.messagelist")
    assert ClaimFeedback.objects.get(claim=claim).resolution == "dismissed"
    assert Claim.objects.get(pk=claim.pk).confidence == derived

    page.goto(f"{live_server.url}/admin/claims/claim/health/?fleet=shop")
    page.wait_for_selector("#flagged")
    flagged = page.locator("#flagged .cl-health-row")
    assert flagged.count() == 1 and other.public_id in flagged.inner_text()
    page.screenshot(path=str(ARTIFACTS / "memory-health.png"), full_page=True)
    page.check(f"#flagged tr[data-claim='{other.public_id}'] input[type=checkbox]")
    page.select_option("select[name=action]", "contest")
    page.fill("input[name=note]", "agents say it changed")
    page.click("#health-actions input[type=submit]")
    page.wait_for_selector("ul.messagelist")
    assert "Contest: 1 claim(s)" in page.inner_text("ul.messagelist")
    contested = Claim.objects.get(pk=other.pk)
    assert contested.contested and contested.status == Claim.Status.PROMOTED
    assert contested.events.filter(kind="contested", note="agents say it changed").exists()
