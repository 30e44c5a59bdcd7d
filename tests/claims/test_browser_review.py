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
from tests.claims.witness import seen_cited

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
    seen_cited(fleet, evidence)
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


def _login(page: Any, live_server: Any, next_url: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={next_url}")
    page.fill("#id_username", "mira")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")


def _bridge(cache_dir: Path, fleet: Fleet) -> Any:
    """The bridge's own tool layer over the rendered cache (what an agent's bridge runs)."""
    from mcp_bridge import tools
    from mcp_bridge.config import Config

    config = Config(
        cache_dir=cache_dir,
        spool_dir=cache_dir.parent / "spool",
        fleet=fleet.slug,
        agent="ada",
        session="s-bridge",
    )
    return tools.Bridge.from_config(config)


def test_a_moderator_supersedes_a_conflicting_claim_and_agents_stop_finding_it(
    page: Any, live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claims import tasks
    from ctxlake_site import workers
    from tests.claims.witness import seen

    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    fleet = Fleet.objects.create(slug="shop", name="Shop", memory_mode="live")
    agent = Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code")
    mira = _moderator(fleet)
    seen(fleet, "sess-1", "sess-2", agent=agent)
    old = _propose(fleet, agent, "The payments tests need STRIPE_API_BASE set to the mock", 1)
    tasks.embed_pending()
    moderation.promote_claim(old, by=mira)
    new = _propose(
        fleet, agent, "The payments tests do not need STRIPE_API_BASE set to the mock", 2
    )
    tasks.embed_pending()
    new.refresh_from_db()
    assert (new.status, new.near_relation) == ("proposed", "conflict")
    workers.render_fleet(fleet)
    bridge = _bridge(tmp_path / "cache", fleet)
    before = bridge.call("memory_search", {"query": "payments tests STRIPE_API_BASE mock"})
    assert old.public_id in [r["id"] for r in before["results"]]
    ARTIFACTS.mkdir(exist_ok=True)

    _login(page, live_server, "/admin/")
    page.wait_for_selector("#review-queue-entry")
    assert "Review queue (1 waiting)" in page.inner_text("#review-queue-entry")
    assert page.inner_text("#site-name").strip() == "ctxlake"
    page.screenshot(path=str(ARTIFACTS / "admin-index.png"), full_page=True)

    page.click("#review-queue-entry a:has-text('Review queue')")
    page.wait_for_selector("#result_list")
    row = page.locator("#result_list tbody tr").first
    assert f"possible conflict with {old.public_id}" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "conflict-queue.png"), full_page=True)

    page.click(f"#result_list a:text-is('{new.public_id}')")
    page.wait_for_selector("#neighbours tr.conflict")
    pair = page.locator(f"#neighbours tr.conflict[data-claim='{old.public_id}']")
    assert pair.locator("mark").first.inner_text() in ("not", "do")
    assert "negation: not" in pair.inner_text()
    assert "✓ verified" in page.inner_text("#evidence")
    page.screenshot(path=str(ARTIFACTS / "conflict-pair.png"), full_page=True)

    pair.locator(f"input[value='Promote this, supersede {old.public_id}']").click()
    page.wait_for_selector("ul.messagelist")
    said = page.text_content("ul.messagelist") or ""
    assert f"Superseded {old.public_id} by {new.public_id}" in said
    page.screenshot(path=str(ARTIFACTS / "conflict-superseded.png"), full_page=True)
    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.superseded_by_id, new.status) == (new.pk, "promoted")

    workers.render_fleet(fleet)
    after = bridge.call("memory_search", {"query": "payments tests STRIPE_API_BASE mock"})
    ids = [r["id"] for r in after["results"]]
    assert new.public_id in ids and old.public_id not in ids


def test_keyboard_triage_of_five_proposals(page: Any, live_server: Any) -> None:
    fleet = Fleet.objects.create(slug="shop", name="Shop", memory_mode="live")
    agent = Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code")
    _moderator(fleet)
    texts = [
        "Payments tests need the ledger mock on port 7070",
        "Refunds are computed in minor units",
        "The checkout service reads STRIPE_KEY from vault",
        "Run make db-reset before the payments tests",
        "Flaky: test_refund fails on Mondays",
    ]
    claims = [_propose(fleet, agent, text, n) for n, text in enumerate(texts, start=1)]
    ARTIFACTS.mkdir(exist_ok=True)
    _login(page, live_server, "/admin/claims/claim/review/")
    page.wait_for_selector("#result_list tr.cl-current")
    done = "#result_list tr.cl-done"

    def wait_done(n: int) -> None:
        page.wait_for_function(f"document.querySelectorAll('{done}').length === {n}")

    page.keyboard.press("p")  # 1: promote
    wait_done(1)
    page.keyboard.press("r")  # 2: reject, with a reason typed inline
    page.fill("#cl-reason", "same as cc-01, reworded")
    page.keyboard.press("Enter")
    wait_done(2)
    page.keyboard.press("j")  # skip 3 for now…
    page.keyboard.press("p")  # 4: promote
    wait_done(3)
    page.keyboard.press("k")  # …back over the decided 4 to 3
    page.keyboard.press("k")
    page.keyboard.press("p")  # 3: promote
    wait_done(4)
    page.keyboard.press("j")
    page.keyboard.press("j")  # to 5 (4 is decided and skipped)
    page.keyboard.press("r")
    page.fill("#cl-reason", "not reproducible")
    page.keyboard.press("Enter")
    wait_done(5)
    page.screenshot(path=str(ARTIFACTS / "keyboard-triage.png"), full_page=True)

    statuses = []
    for claim in claims:
        claim.refresh_from_db()
        statuses.append(claim.status)
    assert statuses == ["promoted", "rejected", "promoted", "promoted", "rejected"]
    reasons = [c.events.get(kind="rejected").note for c in claims if c.status == "rejected"]
    assert reasons == ["same as cc-01, reworded", "not reproducible"]
    page.reload()
    assert page.locator("#result_list tbody tr").count() == 0
