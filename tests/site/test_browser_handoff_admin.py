"""A handoff's change page in a real headless Chromium: a page opened before an agent
picked the handoff up cannot save over the pickup (fleet.admin.HandoffForm).

Same browser set-up as tests/claims/test_browser_review.py (Debian's chromium via
Playwright).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from fleet import handoffs
from fleet.models import Agent, Fleet, Handoff
from tests.claims.test_browser_review import ARTIFACTS, PASSWORD, _login, page

__all__ = ["page"]  # the fixture, re-used

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_page_opened_before_a_pickup_is_refused_then_saves_once_reloaded(
    page: Any, live_server: Any,
) -> None:
    fleet = Fleet.objects.create(slug="shop", name="Shop")
    ada = Agent.objects.create(fleet=fleet, agent_id="ada")
    bo = Agent.objects.create(fleet=fleet, agent_id="bo")
    handoff = handoffs.create_handoff(ada, summary="half done", source_trust="operator")
    User.objects.create_superuser("mira", password=PASSWORD)
    ARTIFACTS.mkdir(exist_ok=True)

    _login(page, live_server, f"/admin/fleet/handoff/{handoff.pk}/change/")
    page.wait_for_selector("select[name=status]")
    assert page.input_value("input[name=seen_version]") == "1"
    assert isinstance(handoffs.pick_up_handoff(handoff, by=bo, expected_version=1), Handoff)

    page.select_option("select[name=status]", "blocked")
    page.click("input[name=_continue]")
    error = page.wait_for_selector(".errornote, ul.errorlist.nonfield")
    assert error is not None
    assert "changed after the page was opened (version 1, now 2)" in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / "handoff-stale-form.png"), full_page=True)
    row = Handoff.objects.get(pk=handoff.pk)
    assert (row.state, row.status, row.version) == ("picked_up", "in_progress", 2)

    page.goto(f"{live_server.url}/admin/fleet/handoff/{handoff.pk}/change/")
    page.select_option("select[name=status]", "blocked")
    page.click("input[name=_continue]")
    page.wait_for_selector("ul.messagelist")
    row = Handoff.objects.get(pk=handoff.pk)
    assert (row.state, row.picked_up_by, row.status, row.version) == ("picked_up", bo,
                                                                       "blocked", 3)
