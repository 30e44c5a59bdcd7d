"""The team page in a real headless Chromium, wide and phone-sized; screenshots in artifacts/.

A fleet of ten agents, some of whose leases overlap, two open handoffs and a queue of
proposals: the page must show them at 1400 px and at 390 px without scrolling sideways,
and the admin's "View site" link must lead to it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from claims import moderation
from claims.models import Claim
from ctxlake_site import workers
from fleet.models import Activity, Agent, Fleet, FleetModerator, Handoff, Lease
from tests.claims.test_browser_review import ARTIFACTS, page  # noqa: F401 (the fixture)
from tests.claims.witness import seen_cited

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "team-pass-1234"

LEASES = {
    "ada": ["src/payments/**"],
    "bo": ["src/payments/refund.py", "tests/test_payments.py"],
    "cy": ["docs/architecture/overview.md"],
    "dee": ["src/api/views.py", "src/api/serializers.py"],
    "eli": ["src/api/**/*.py"],
    "fay": ["frontend/components/checkout/very_long_component_name_for_wrapping.tsx"],
    "gus": ["infra/terraform/modules/network/main.tf"],
    "hal": ["README.md"],
    "ivy": [],
    "jo": ["migrations/0042_add_refund_reason.py"],
}


def _fleet() -> Fleet:
    fleet = Fleet.objects.create(slug="acme", name="Acme shop", memory_mode="live")
    now = timezone.now()
    agents = {
        name: Agent.objects.create(
            fleet=fleet,
            agent_id=name,
            runtime="claude-code",
            last_seen_at=now - timedelta(minutes=i),
        )
        for i, name in enumerate(LEASES)
    }
    for name, paths in LEASES.items():
        for path in paths:
            Lease.objects.create(
                fleet=fleet, agent=agents[name], path=path, expires_at=now + timedelta(hours=1)
            )
    Handoff.objects.create(
        fleet=fleet,
        from_agent=agents["ada"],
        summary="Refund flow: the happy path works; partial refunds do not "
        "round the tax yet. Tests in tests/test_payments.py are red.",
    )
    Handoff.objects.create(
        fleet=fleet,
        from_agent=agents["cy"],
        status=Handoff.Status.BLOCKED,
        summary="Architecture doc waits on the API decision.",
    )
    claims = []
    for n in range(5):
        evidence = [{"session_id": f"sess-{n}", "message_id": f"m-{n}"}]
        seen_cited(fleet, evidence, agent=agents["bo"])
        claims.append(
            moderation.propose_claim(
                fleet,
                text=f"The payments tests need the fake gateway on port 80{n}",
                type="gotcha",
                subject="payments tests",
                evidence=evidence,
                by_agent=agents["bo"],
            ).claim
        )
    root = User.objects.create_superuser("root", password=PASSWORD)
    moderation.promote_claim(claims[0], by=root)
    Claim.objects.filter(pk=claims[0].pk).update(staleness=0.5)  # as a lease on its file would
    for days_ago in range(0, 30, 2):
        for _ in range(days_ago % 5 + 1):
            Activity.objects.create(
                fleet=fleet,
                verb="lease.claimed",
                agent=agents["ada"],
                at=now - timedelta(days=days_ago),
            )
    return fleet


def _moderator(fleet: Fleet) -> User:
    user = User.objects.create_user("mira", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    FleetModerator.objects.create(fleet=fleet, user=user)
    return user


def _overflow(page: Any) -> int:  # noqa: F811
    return int(page.evaluate("document.documentElement.scrollWidth"))


def test_the_team_page_reads_well_wide_and_on_a_phone(
    page: Any,  # noqa: F811 - the fixture imported above
    live_server: Any,
    spool_dir: Path,
) -> None:
    fleet = _fleet()
    _moderator(fleet)
    workers.render_fleet(fleet)
    ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/")
    assert page.url == f"{live_server.url}/admin/login/?next=/"
    page.fill("#id_username", "mira")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    section = page.locator("#fleet-acme")
    text = section.inner_text()
    assert "Active agents\n10" in text or "Active agents 10" in text
    assert "Open handoffs\n2" in text or "Open handoffs 2" in text
    assert "Refund flow" in text and "Architecture doc" in text
    assert page.locator(".holder.overlap").count() == 5  # ada, bo; dee twice, eli
    assert "overlaps bo" in text and "overlaps eli" in text
    assert page.locator("svg.chart").count() == 2
    assert page.locator("dt:text('Proposals waiting') + dd").inner_text().startswith("4")
    assert page.locator("dt:text('Possibly stale') + dd").inner_text() == "1"
    assert "never rendered" not in text
    assert page.evaluate("getComputedStyle(document.querySelector('.card')).borderRadius") == "8px"
    assert _overflow(page) <= 1400
    page.screenshot(path=str(ARTIFACTS / "team-page-1400.png"), full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    assert _overflow(page) <= 390, f"scrolls sideways: {_overflow(page)} px wide"
    assert page.locator("svg.chart").first.bounding_box()["width"] <= 390
    page.screenshot(path=str(ARTIFACTS / "team-page-390.png"), full_page=True)

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/admin/")
    page.click("text=View site")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("#fleet-acme").count() == 1
