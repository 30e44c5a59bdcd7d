"""The review queue's source and groups (issue 16, item 5): where a proposal came from
(an agent, or the transcript capture and which extractor), and proposals several sessions
made about the same thing shown together, counted by the verified-sessions rule."""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.apps import apps
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from claims import moderation, spool_apply
from claims.models import Claim, ClaimEvent
from fleet.models import Agent, Fleet, FleetModerator
from fleet.spool_apply import Envelope
from mcp_bridge.contract import events as ev
from tests.claims.test_browser_review import ARTIFACTS
from tests.claims.test_browser_review import page as page  # the headless Chromium fixture
from tests.claims.witness import seen

QUEUE = "/admin/claims/claim/review/"


@pytest.fixture
def as_mod(client: Client, mod: User, fleet_a: Fleet) -> Client:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    client.force_login(mod)
    return client


def _propose(
    fleet: Fleet, text: str, session: str, message: str = "m1", extractor: str = "",
    agent: Agent | None = None,
) -> moderation.Proposal:
    request = moderation.ProposalRequest(
        text=text,
        type="fact",
        subject="pytest",
        evidence=[{"session_id": session, "message_id": message}],
        by_agent=agent,
        extractor=extractor,
    )
    (result,) = moderation.propose_many(fleet, [request])
    assert isinstance(result, moderation.Proposal), result
    return result


def _rows(client: Client, query: str = "") -> list[Claim]:
    response = client.get(QUEUE + query)
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def _cell(client: Client, column: str, query: str = "") -> dict[str, str]:
    """Each queue row's rendered `column` cell, by public id."""
    response = client.get(QUEUE + query)
    cl = response.context["cl"]
    admin = cl.model_admin
    return {c.public_id: str(getattr(admin, column)(c)) for c in cl.result_list}


# Source ---------------------------------------------------------------------------------


@pytest.fixture
def sources(fleet_a: Fleet, ada: Agent) -> dict[str, Claim]:
    seen(fleet_a, "s1", "s2", "s3", agent=ada)
    return {
        "agent": _propose(fleet_a, "pytest -x stops at the first failure", "s1", agent=ada).claim,
        "error_fix": _propose(
            fleet_a, "make test passed after pinning ruff", "s2", extractor="error_fix", agent=ada
        ).claim,
        "lesson": _propose(
            fleet_a, "always run migrate before the bench", "s3", extractor="lesson", agent=ada
        ).claim,
    }


def test_a_captured_proposal_records_its_extractor_and_an_agents_own_none(
    sources: dict[str, Claim],
) -> None:
    assert {k: c.extractor for k, c in sources.items()} == {
        "agent": "", "error_fix": "error_fix", "lesson": "lesson"
    }
    stored = dict(Claim.objects.values_list("pk", "extractor"))
    assert stored == {c.pk: c.extractor for c in sources.values()}
    # the proposed event keeps its note and data as before
    event = ClaimEvent.objects.get(claim=sources["lesson"], kind="proposed")
    assert event.data == {"extractor": "lesson"} and "extractor: lesson" in event.note


def test_the_drains_applier_passes_the_extractor_to_the_claim(
    fleet_a: Fleet, ada: Agent
) -> None:
    def envelope(i: int, **extra: str) -> Envelope:
        payload = {"claim": f"captured thing {i} holds", "type": "gotcha", "subject": "src/a.py",
                   "evidence": [{"session_id": "cc-s1", "message_id": f"u{i}"}], **extra}
        return Envelope(f"e{i}", ev.KIND_CLAIM_PROPOSED, fleet_a, ada, None, timezone.now(),
                        payload)

    spool_apply.apply_claims_proposed([envelope(1, extractor="works_here"), envelope(2)])
    assert dict(Claim.objects.values_list("text", "extractor")) == {
        "captured thing 1 holds": "works_here", "captured thing 2 holds": ""
    }


def test_every_extractor_of_the_contract_can_be_stored(fleet_a: Fleet) -> None:
    """The column's check constraint follows the contract's list (a new extractor needs
    `makemigrations claims`; this fails until it is made)."""
    for i, name in enumerate(ev.CAPTURE_EXTRACTORS):
        claim = _propose(fleet_a, f"candidate {i} from a transcript", f"s{i}", extractor=name).claim
        claim.refresh_from_db()
        assert claim.extractor == name


def test_an_unknown_extractor_is_refused_before_anything_is_written(fleet_a: Fleet) -> None:
    request = moderation.ProposalRequest(
        "made up", "fact", "pytest", [{"session_id": "s", "message_id": "m"}], extractor="regex9"
    )
    (result,) = moderation.propose_many(fleet_a, [request])
    assert isinstance(result, moderation.InvalidProposal)
    assert "extractor must be one of" in str(result)
    assert not Claim.objects.exists()


def test_the_queue_says_agent_or_captured_with_the_extractor(
    as_mod: Client, sources: dict[str, Claim]
) -> None:
    cells = _cell(as_mod, "source")
    assert cells[sources["agent"].public_id] == "agent"
    assert "captured · error_fix" in cells[sources["error_fix"].public_id]
    assert "captured · lesson" in cells[sources["lesson"].public_id]
    html = as_mod.get(QUEUE).content.decode()
    assert '<span class="cl-captured"' in html and "captured · error_fix" in html


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?source=agent", ["agent"]),
        ("?source=captured", ["error_fix", "lesson"]),
        ("?source=error_fix", ["error_fix"]),
        ("?source=lesson", ["lesson"]),
        ("?source=works_here", []),
        ("?source=forged", []),
        ("", ["agent", "error_fix", "lesson"]),
    ],
)
def test_the_source_filter(
    as_mod: Client, sources: dict[str, Claim], query: str, expected: list[str]
) -> None:
    names = {c.pk: name for name, c in sources.items()}
    assert [names[c.pk] for c in _rows(as_mod, query)] == expected


def test_the_source_filter_offers_each_extractor_of_the_contract(
    as_mod: Client, sources: dict[str, Claim]
) -> None:
    html = as_mod.get(QUEUE).content.decode()
    assert "agent&#x27;s own" in html and "captured, any extractor" in html
    for name in ev.CAPTURE_EXTRACTORS:
        assert f"?source={name}" in html and f"captured · {name}" in html


def test_the_review_page_says_where_the_proposal_came_from(
    as_mod: Client, sources: dict[str, Claim]
) -> None:
    def source(claim: Claim) -> str:
        html = as_mod.get(reverse("admin:claims_claim_change", args=(claim.pk,))).content.decode()
        return html.split('id="claim-source">', 1)[1].split("</td>", 1)[0]

    assert "captured · error_fix" in source(sources["error_fix"])
    assert source(sources["agent"]).startswith("agent")


# Groups ---------------------------------------------------------------------------------

TEXT = "pytest -x stops at the first failure"


@pytest.fixture
def group(fleet_a: Fleet, ada: Agent, bo: Agent) -> dict[str, Claim]:
    """cc-01 from session s-a; three days later the queue holds, in filing order:

    - root (s-a, verified), 3 days old
    - other: an unrelated proposal, 2 days old
    - again: the same text from s-x, a session the fleet never saw (unverified) — not
      corroboration, a new proposal labelled likely duplicate of root; 1 day old
    - near: a near-identical text from s-b (verified), labelled likely duplicate of root
      as the embedding task would; now
    Identical text from verified s-b is corroboration of root, not a proposal.
    """
    seen(fleet_a, "s-a", agent=ada)
    seen(fleet_a, "s-b", "s-c", agent=bo)
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=3)):
        root = _propose(fleet_a, TEXT, "s-a", agent=ada).claim
    with time_machine.travel(now - timedelta(days=2)):
        other = _propose(fleet_a, "cargo build needs --locked here", "s-c", agent=bo).claim
    with time_machine.travel(now - timedelta(days=1)):
        again = _propose(fleet_a, TEXT.upper(), "s-x", extractor="lesson").claim
    near = _propose(fleet_a, TEXT + " in this repo", "s-b", extractor="error_fix", agent=bo).claim
    moderation.label_near_claims([moderation.NearLabel(near, root, 0.97, "duplicate")])
    corroboration = _propose(fleet_a, TEXT, "s-b", message="m7", agent=bo)
    assert corroboration.claim == root and not corroboration.created
    assert again.near_claim == root and again.near_relation == "duplicate"
    return {"root": root, "other": other, "again": again, "near": near}


def test_a_group_is_shown_together_ordered_by_its_oldest_member(
    as_mod: Client, group: dict[str, Claim]
) -> None:
    names = {c.pk: name for name, c in group.items()}
    # oldest first at group level: the root's group (3 days) before `other` (2 days)
    assert [names[c.pk] for c in _rows(as_mod)] == ["root", "again", "near", "other"]
    # a filter narrows the group: its oldest member in view orders it
    captured = [names[c.pk] for c in _rows(as_mod, "?source=captured")]
    assert captured == ["again", "near"]


def test_the_group_column_counts_proposals_and_only_verified_independent_sessions(
    as_mod: Client, group: dict[str, Claim]
) -> None:
    cells = _cell(as_mod, "group")
    # s-a and s-b (root's evidence now includes s-b by corroboration, near cites s-b);
    # s-x, cited by `again`, is unverified and does not count
    for name in ("root", "again", "near"):
        assert "3 proposals · 2 sessions" in cells[group[name].public_id]
    assert cells[group["other"].public_id] == ""


def test_handoff_linked_sessions_count_once_in_a_group(
    as_mod: Client, fleet_a: Fleet, ada: Agent, bo: Agent, group: dict[str, Claim]
) -> None:
    from fleet import handoffs
    from fleet.models import Session

    handoff = handoffs.create_handoff(
        ada, summary="carry on", session=Session.objects.get(fleet=fleet_a, session_id="s-a")
    )
    picked = handoffs.pick_up_handoff(
        handoff, by=bo, expected_version=handoff.version, confirm=True,
        session=Session.objects.get(fleet=fleet_a, session_id="s-b"),
    )
    assert picked.picked_up_session is not None  # type: ignore[union-attr]
    assert "3 proposals · 1 session" in _cell(as_mod, "group")[group["root"].public_id]


def test_a_promoted_root_is_named_beside_its_duplicates(
    as_mod: Client, fleet_a: Fleet, mod: User, group: dict[str, Claim]
) -> None:
    moderation.promote_claim(group["root"], by=mod)
    cells = _cell(as_mod, "group")
    root = group["root"].public_id
    assert f"2 proposals + {root} promoted · 2 sessions" in cells[group["again"].public_id]
    assert root not in cells  # promoted: no longer in the queue


def test_a_rejected_duplicate_leaves_its_group(
    as_mod: Client, mod: User, group: dict[str, Claim]
) -> None:
    moderation.reject_claim(group["near"], by=mod, reason="says the same")
    # s-b still counts: root cites it since the corroboration
    assert "2 proposals · 2 sessions" in _cell(as_mod, "group")[group["root"].public_id]


def test_groups_are_one_level_never_chained(
    as_mod: Client, fleet_a: Fleet, group: dict[str, Claim]
) -> None:
    chained = _propose(fleet_a, TEXT + " in this repo too", "s-c").claim
    moderation.label_near_claims(
        [moderation.NearLabel(chained, group["near"], 0.98, "duplicate")])
    cells = _cell(as_mod, "group")
    assert "3 proposals · 2 sessions" in cells[group["near"].public_id]
    assert cells[chained.public_id] == ""


def test_the_review_page_lists_the_groups_other_members_with_links(
    as_mod: Client, group: dict[str, Claim]
) -> None:
    def review_page(claim: Claim) -> str:
        return as_mod.get(reverse("admin:claims_claim_change", args=(claim.pk,))).content.decode()

    for name in ("root", "again", "near"):
        shown = review_page(group[name])
        assert "Group: 3 proposals · 2 sessions" in shown
        panel = shown.split('id="group"', 1)[1].split("</table>", 1)[0]
        for other in ("root", "again", "near"):
            href = reverse("admin:claims_claim_change", args=(group[other].pk,))
            if other == name:
                assert f'data-claim="{group[other].public_id}"' not in panel
            else:
                assert f'<a href="{href}">{group[other].public_id}</a>' in panel
        assert group["other"].public_id not in panel
    assert 'id="group"' not in review_page(group["other"])


def test_a_column_sort_still_works_in_the_queue(as_mod: Client, group: dict[str, Claim]) -> None:
    rows = _rows(as_mod, "?o=-1")  # by id, descending
    assert [c.number for c in rows] == sorted((c.number for c in rows), reverse=True)


def _queue_queries(client: Client) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(QUEUE)
    assert response.status_code == 200
    return len(captured), len(response.context["cl"].result_list)


def test_the_queues_queries_do_not_grow_with_rows_or_groups(
    as_mod: Client, fleet_a: Fleet, ada: Agent, bo: Agent
) -> None:
    seen(fleet_a, *(f"s{i}" for i in range(200)), agent=ada)

    def add_groups(start: int, count: int) -> None:
        for i in range(start, start + count):
            root = _propose(fleet_a, f"fact {i} about the build", f"s{i}", agent=ada).claim
            again = _propose(fleet_a, f"FACT {i} about the build", f"s{i}", "m2").claim
            near = _propose(fleet_a, f"fact {i} about the builds", f"s{i + 100}", agent=bo).claim
            moderation.label_near_claims([moderation.NearLabel(near, root, 0.96, "duplicate")])
            assert again.near_claim == root

    add_groups(0, 2)
    few, few_rows = _queue_queries(as_mod)
    add_groups(2, 14)
    many, many_rows = _queue_queries(as_mod)
    assert (few_rows, many_rows) == (6, 48)
    assert many == few, (few, many)
    # the queue's 9 (session, user, permissions, filter choices, counts, the page), then
    # the labelled claims, the groups' members, their sessions, verified ones, handoffs
    assert many <= 14
    assert all("3 proposals · 2 sessions" in v for v in _cell(as_mod, "group").values())


# The data migration ---------------------------------------------------------------------


def test_the_migration_fills_the_extractor_from_proposed_events(
    fleet_a: Fleet, ada: Agent
) -> None:
    migration: Any = importlib.import_module("claims.migrations.0005_claim_extractor")
    captured = _propose(fleet_a, "ruff needs --fix here", "s1", extractor="works_here").claim
    own = _propose(fleet_a, "pytest -x is quick", "s2", agent=ada).claim
    odd = _propose(fleet_a, "an event naming no known extractor", "s3").claim
    ClaimEvent.objects.create(claim=odd, kind="proposed", data={"extractor": "regex9"})
    Claim.objects.update(extractor="")  # as the rows were before the field existed
    before = list(ClaimEvent.objects.order_by("pk").values_list("pk", "note", "data"))

    migration.fill_extractor(apps, None)

    assert dict(Claim.objects.values_list("pk", "extractor")) == {
        captured.pk: "works_here", own.pk: "", odd.pk: ""
    }
    assert list(ClaimEvent.objects.order_by("pk").values_list("pk", "note", "data")) == before


# In a real browser ----------------------------------------------------------------------


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_browser_shows_a_group_together_with_its_source_badges(
    page: Any, live_server: Any, fleet_a: Fleet, group: dict[str, Claim]
) -> None:
    user = User.objects.create_user("mira", password="mod-pass-1234", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    FleetModerator.objects.create(fleet=fleet_a, user=user)
    near = group["near"]

    page.goto(f"{live_server.url}/admin/login/?next=/admin/claims/claim/review/")
    page.fill("#id_username", "mira")
    page.fill("#id_password", "mod-pass-1234")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    ids = page.locator("#result_list tbody .field-public_id").all_inner_texts()
    assert [i.strip() for i in ids] == ["cc-01", "cc-03", "cc-04", "cc-02"]
    groups = page.locator("#result_list tbody .field-group").all_inner_texts()
    assert groups[:3] == ["3 proposals · 2 sessions"] * 3
    sources = page.locator("#result_list tbody .field-source").all_inner_texts()
    assert sources == ["agent", "captured · lesson", "captured · error_fix", "agent"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "queue-groups.png"), full_page=True)
    page.click(f"#result_list a:text('{near.public_id}')")
    page.wait_for_selector("#group")
    assert "Group: 3 proposals · 2 sessions" in page.inner_text("#group h2")
    page.screenshot(path=str(ARTIFACTS / "review-group.png"), full_page=True)
