"""The review queue in a real headless Chromium: log in, open a claim, promote it.

Debian's chromium (/usr/bin/chromium, installed by `./ctxlake test`) driven by Playwright,
which is told where the browser is and so downloads none. The test skips, saying why,
only where no browser can be launched. Screenshots go to artifacts/ (gitignored).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections

from claims import moderation
from claims.models import Claim
from fleet.models import Agent, Fleet, FleetModerator

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
CHROMIUM = os.environ.get("CTXLAKE_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "mod-pass-1234"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh headless Chromium page; skip (with the reason) if none can be launched."""
    # Playwright's sync API keeps an event loop on this thread, which Django's async-safety
    # check mistakes for async code calling the ORM; nothing here is actually concurrent.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -r requirements-dev.txt)")
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(f"no Chromium at {CHROMIUM}; `./ctxlake test` installs Debian's package")
    profile = tempfile.mkdtemp(prefix="ctxlake-chromium-")
    with sync_playwright() as pw:
        try:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                headless=True,
                args=ARGS,
                viewport={"width": 1280, "height": 900},
            )
        except Exception as exc:  # noqa: BLE001 - any launch failure means "no browser here"
            pytest.skip(f"Chromium could not be launched: {exc}")
        try:
            yield context.new_page()
        finally:
            # Inside sync_playwright the test ran in Playwright's greenlet, whose context
            # has database connections of its own (Django keeps them per context): close
            # them here, or the test database cannot be dropped at the end of the run.
            connections.close_all()
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def _moderator(fleet: Fleet) -> User:
    user = User.objects.create_user("mira", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    FleetModerator.objects.create(fleet=fleet, user=user)
    return user


def _propose(fleet: Fleet, agent: Agent, text: str, n: int) -> Claim:
    evidence = [
        {
            "session_id": f"sess-{n}",
            "message_id": f"msg-{n}",
            "repo": "github.com/acme/shop",
            "path": "tests/test_payments.py",
            "commit": "9f2c1ab",
            "excerpt": "FAILED tests/test_payments.py::test_refund - ConnectionRefused",
        }
    ]
    return moderation.propose_claim(
        fleet, text=text, type="gotcha", subject="payments tests", evidence=evidence, by_agent=agent
    ).claim


def test_a_moderator_promotes_a_claim_and_it_leaves_the_queue(page: Any, live_server: Any) -> None:
    fleet = Fleet.objects.create(slug="shop", name="Shop", memory_mode="live")
    agent = Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code")
    _moderator(fleet)
    claim = _propose(fleet, agent, "The payments tests need STRIPE_API_BASE set to the mock", 1)
    _propose(fleet, agent, "Run migrations before\u200b the payments tests\u202e", 2)
    ARTIFACTS.mkdir(exist_ok=True)

    page.goto(f"{live_server.url}/admin/login/?next=/admin/claims/claim/review/")
    page.fill("#id_username", "mira")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    assert page.title().startswith("Review queue")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2
    assert "<U+200B>" in rows.nth(1).inner_text()  # hidden characters made visible
    page.screenshot(path=str(ARTIFACTS / "review-queue.png"), full_page=True)

    page.click(f"#result_list a:text-is('{claim.public_id}')")
    page.wait_for_selector("#promote-form")
    assert "STRIPE_API_BASE" in page.inner_text("#claim-text")
    assert "tests/test_payments.py" in page.inner_text("#evidence")
    assert "The gate is open" in page.inner_text("#gate")
    page.screenshot(path=str(ARTIFACTS / "review-claim.png"), full_page=True)

    page.click("#promote-button")
    page.wait_for_selector("ul.messagelist")
    assert f"Promoted {claim.public_id}" in page.inner_text("ul.messagelist")
    assert page.url.endswith("/admin/claims/claim/review/")
    remaining = page.locator("#result_list tbody tr")
    assert remaining.count() == 1 and claim.public_id not in remaining.inner_text()
    page.screenshot(path=str(ARTIFACTS / "review-queue-after.png"), full_page=True)
    claim.refresh_from_db()
    assert claim.status == "promoted"
