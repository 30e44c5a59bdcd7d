"""The fleet's settings page in a real headless Chromium: the webhook secret is write-only.

Same browser set-up as tests/claims/test_browser_review.py (Debian's chromium via
Playwright). The page never carries the stored secret, not even in a hidden value; a
person replaces it by typing a new one, and saving the page untouched keeps it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from fleet.models import Fleet
from tests.claims.test_browser_review import ARTIFACTS, PASSWORD, _login, page

__all__ = ["page"]  # the fixture, re-used

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECRET = "whsec-browser-5678"


def test_the_secret_is_never_on_the_page_and_saving_untouched_keeps_it(
    page: Any, live_server: Any,
) -> None:
    fleet = Fleet.objects.create(slug="shop", name="Shop",
                                 incident_webhook_url="https://hooks.example.com/ctxlake",
                                 incident_webhook_secret=SECRET)
    User.objects.create_superuser("mira", password=PASSWORD)
    ARTIFACTS.mkdir(exist_ok=True)

    _login(page, live_server, f"/admin/fleet/fleet/{fleet.pk}/change/")
    field = page.wait_for_selector("input[name=incident_webhook_secret]")
    assert field.get_attribute("type") == "password" and field.input_value() == ""
    assert SECRET not in page.content()
    assert "a secret is set" in page.inner_text("body")
    page.screenshot(path=str(ARTIFACTS / "fleet-webhook-secret.png"), full_page=True)

    page.click("input[name=_continue]")  # saved untouched
    page.wait_for_selector("ul.messagelist")
    fleet.refresh_from_db()
    assert fleet.incident_webhook_secret == SECRET

    page.fill("input[name=incident_webhook_secret]", "whsec-new-9999")
    page.click("input[name=_continue]")
    page.wait_for_selector("ul.messagelist")
    fleet.refresh_from_db()
    assert fleet.incident_webhook_secret == "whsec-new-9999"
    assert "whsec-new-9999" not in page.content()
