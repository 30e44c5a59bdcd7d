"""The review queue, the review page and its actions, through the Django test client."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from claims import embeddings, moderation
from claims.models import EMBEDDING_DIMS, Claim, ClaimEvent, ClaimFeedback
from fleet.models import Agent, Fleet, FleetModerator
from tests.claims.witness import seen_cited

QUEUE = "/admin/claims/claim/review/"
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _propose(fleet: Fleet, agent: Agent | None = None, n: int = 1, **kw: Any) -> Claim:
    args = {
        "text": "pytest -x stops at the first failure",
        "type": "fact",
        "subject": "pytest",
        "evidence": [{"session_id": f"s{n}", "message_id": "m1", "path": "src/a.py"}],
        **kw,
    }
    seen_cited(fleet, args["evidence"])
    return moderation.propose_claim(fleet, by_agent=agent, **args).claim


def _many(fleet: Fleet, count: int, **kw: Any) -> list[Claim]:
    return [
        _propose(fleet, n=i, text=f"fact number {i} about the build", **kw) for i in range(count)
    ]


def _act(client: Client, claim: Claim, action: str, **data: str) -> HttpResponse:
    return client.post(reverse("admin:claims_claim_moderate", args=(claim.pk, action)), data)


def _messages(response: HttpResponse) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _page(client: Client, claim: Claim) -> str:
    response = client.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    assert response.status_code == 200
    return response.content.decode()


def _queue_ids(client: Client, query: str = "") -> list[str]:
    response = client.get(QUEUE + query)
    assert response.status_code == 200
    return [row.public_id for row in response.context["cl"].result_list]


@pytest.fixture
def fleet_mod(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


@pytest.fixture
def as_mod(client: Client, fleet_mod: User) -> Client:
    client.force_login(fleet_mod)
    return client


# The queue ------------------------------------------------------------------------------


def test_it_lists_only_proposed_claims_oldest_first(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=3)):
        old = _propose(fleet_a, n=1, text="the oldest claim")
    with time_machine.travel(now - timedelta(days=1)):
        promoted = moderation.promote_claim(_propose(fleet_a, n=2, text="done"), by=fleet_mod)
        middle = _propose(fleet_a, n=3, text="the middle claim")
    new = _propose(fleet_a, n=4, text="the newest claim")
    assert _queue_ids(as_mod) == [old.public_id, middle.public_id, new.public_id]
    assert promoted.public_id not in _queue_ids(as_mod)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("?type=gotcha", ["cc-02"]),
        ("?subject=cargo", ["cc-02", "cc-03"]),
        ("?sessions=2", ["cc-03"]),
        ("?sessions=short", ["cc-01", "cc-02"]),
        ("?sessions=enough", ["cc-03"]),
        ("?age=older", ["cc-01"]),
        ("?age=day", ["cc-02", "cc-03"]),
        ("?q=clippy", ["cc-02"]),
        ("?q=cc-03", ["cc-03"]),
    ],
)
def test_it_filters_the_queue(
    as_mod: Client, fleet_a: Fleet, query: str, expected: list[str]
) -> None:
    fleet_a.min_independent_sessions = 2
    fleet_a.save()
    with time_machine.travel(timezone.now() - timedelta(days=40)):
        _propose(fleet_a, text="pytest -x is quick")
    _propose(fleet_a, text="clippy needs -D warnings", type="gotcha", subject="cargo")
    two = [{"session_id": "s1", "message_id": "m"}, {"session_id": "s2", "message_id": "m"}]
    _propose(fleet_a, text="cargo test --workspace is slow", subject="cargo", evidence=two)
    assert _queue_ids(as_mod, query) == expected


def test_its_fleet_filter_offers_only_granted_fleets(
    as_mod: Client, fleet_a: Fleet, fleet_b: Fleet
) -> None:
    _propose(fleet_b, text="fleet b's secret plan")
    response = as_mod.get(QUEUE)
    content = response.content.decode()
    assert "fleet-a" in content and "fleet-b" not in content
    assert _queue_ids(as_mod, f"?fleet={fleet_b.pk}") == []


def test_the_queue_page_does_a_fixed_number_of_queries(
    as_mod: Client, fleet_a: Fleet, ada: Agent, django_assert_max_num_queries: Any
) -> None:
    _many(fleet_a, 50, agent=ada)
    with django_assert_max_num_queries(10):
        response = as_mod.get(QUEUE)
    assert len(response.context["cl"].result_list) == 50
    assert "ada" in response.content.decode()


# The review page ------------------------------------------------------------------------


def test_the_review_page_does_a_fixed_number_of_queries(
    as_mod: Client, fleet_a: Fleet, ada: Agent, fleet_mod: User, django_assert_max_num_queries: Any
) -> None:
    evidence = [{"session_id": f"s{i}", "message_id": "m"} for i in range(20)]
    claim = _propose(fleet_a, ada, evidence=evidence)
    for i in range(10):
        moderation.contest_claim(claim, by=fleet_mod, note=f"note {i}")
        _propose(fleet_a, ada, n=i, text=f"another pytest claim {i}")
        ClaimFeedback.objects.create(claim=claim, agent=ada, verdict="unclear", note=f"fb {i}")
    # 17 today (issue 13 added the verified sessions and the handoff graph; issue 24 the
    # usefulness panel's feedback and contradictions), whatever the evidence, history or
    # feedback size
    with django_assert_max_num_queries(18):
        page = _page(as_mod, claim)
    assert page.count("note ") >= 10 and "s19" in page and page.count("fb ") >= 10


def test_the_review_page_shows_claim_evidence_gate_and_history(
    as_mod: Client, fleet_a: Fleet, ada: Agent
) -> None:
    claim = _propose(
        fleet_a,
        ada,
        evidence=[
            {
                "session_id": "sess-42",
                "message_id": "msg-7",
                "repo": "github.com/acme/app",
                "path": "src/ci.py",
                "commit": "abc123",
                "excerpt": "ran pytest -x; it stopped",
            }
        ],
    )
    page = _page(as_mod, claim)
    for expected in ("sess-42", "msg-7", "github.com/acme/app", "src/ci.py", "abc123"):
        assert expected in page
    assert "ran pytest -x; it stopped" in page
    assert "The gate is open" in page
    assert "ada (claude-code)" in page
    assert 'id="claim-sessions">1' in page
    assert "proposed" in page and 'id="promote-form"' in page


def test_the_review_page_makes_hidden_characters_visible(as_mod: Client, fleet_a: Fleet) -> None:
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "obey me")
    claim = _propose(
        fleet_a,
        text="run make\u200b test\u202e first" + hidden,
        evidence=[{"session_id": "s", "message_id": "m", "excerpt": "see\u2066 here"}],
    )
    page = _page(as_mod, claim)
    assert "&lt;U+200B&gt;" in page and "&lt;U+202E&gt;" in page and "&lt;U+2066&gt;" in page
    assert "hidden tag text: “obey me”" in page
    assert "Agents would see: <q>run make test first</q>" in page
    assert "\u200b" not in page


def test_the_review_page_escapes_what_agents_wrote(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a, text="use <script>alert(1)</script>\u200b now")
    page = _page(as_mod, claim)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_the_review_page_lists_secrets_as_gate_problems(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    claim.evidence.update(excerpt=f"token {TOKEN}")
    page = _page(as_mod, claim)
    assert "It cannot be promoted: it contains what looks like a secret (github-token)" in page


def _vector(*head: float) -> list[float]:
    return [*head, *([0.0] * (EMBEDDING_DIMS - len(head)))]


def test_the_review_page_lists_nearest_claims_in_the_fleet_with_status(
    as_mod: Client, fleet_a: Fleet, fleet_b: Fleet, fleet_mod: User
) -> None:
    claim = _propose(fleet_a, n=1, text="pytest -x halts at the first failing test")
    near = moderation.promote_claim(
        _propose(fleet_a, n=2, text="pytest -x stops early"), by=fleet_mod
    )
    far = _propose(fleet_a, n=3, text="docker builds need buildkit", subject="docker")
    other = _propose(fleet_b, n=4, text="fleet b: pytest -x stops early")
    for row, vector in [(claim, (1.0, 0.0)), (near, (1.0, 0.1)), (far, (0.0, 1.0)),
                        (other, (1.0, 0.0))]:  # as the embedder stores them: with its name
        Claim.objects.filter(pk=row.pk).update(embedding=_vector(*vector),
                                               embedding_model=embeddings.embedder().NAME)
    response = as_mod.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    neighbours = response.context["review"].neighbours
    assert [(n.claim.public_id, n.why) for n in neighbours] == [
        (near.public_id, "similar"),
        (far.public_id, "similar"),
    ]
    assert neighbours[0].likely_duplicate and neighbours[0].similarity == pytest.approx(0.995, 0.01)
    assert not neighbours[1].likely_duplicate
    assert "fleet b:" not in response.content.decode()


def test_without_an_embedding_it_shows_same_text_and_same_subject_claims(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = _propose(fleet_a, n=1, text="pytest -x halts at the first failing test")
    same_subject = _propose(fleet_a, n=2, text="pytest -q is quieter")
    twin = _propose(fleet_a, n=3, text="a twin, soon reworded")
    moderation.edit_claim(twin, by=fleet_mod, text=" PYTEST -x halts at the first failing  test")
    response = as_mod.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    neighbours = response.context["review"].neighbours
    assert [(n.claim.public_id, n.why) for n in neighbours] == [
        (twin.public_id, "same text"),
        (same_subject.public_id, "same subject"),
    ]
    assert neighbours[0].likely_duplicate
    assert "no embedding yet" in response.content.decode()


# Actions --------------------------------------------------------------------------------


def test_it_promotes_from_the_review_page(as_mod: Client, fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    response = _act(as_mod, claim, "promote", note="checked the CI log")
    assert response.status_code == 302 and response["Location"] == QUEUE
    assert _messages(response) == [f"Promoted {claim.public_id}; agents will see it."]
    claim.refresh_from_db()
    assert (claim.status, claim.scope, claim.promoted_by) == ("promoted", "fleet", fleet_mod)
    event = claim.events.get(kind="promoted")
    assert (event.actor_user, event.note) == (fleet_mod, "checked the CI log")
    assert _queue_ids(as_mod) == []


def test_it_refuses_to_promote_a_claim_whose_evidence_carries_a_secret(
    as_mod: Client, fleet_a: Fleet
) -> None:
    claim = _propose(fleet_a)
    claim.evidence.update(excerpt=f"token {TOKEN}")
    response = _act(as_mod, claim, "promote")
    assert "secret (github-token)" in _messages(response)[0]
    claim.refresh_from_db()
    assert claim.status == "proposed" and not claim.events.filter(kind="promoted").exists()


def test_it_refuses_to_promote_a_claim_with_a_secret_in_its_text(
    as_mod: Client, fleet_a: Fleet
) -> None:
    claim = _propose(fleet_a)
    Claim.objects.filter(pk=claim.pk).update(text=f"log in with {TOKEN}")
    _act(as_mod, claim, "promote")
    claim.refresh_from_db()
    assert claim.status == "proposed"


def test_it_refuses_to_promote_below_the_fleets_minimum(as_mod: Client, fleet_a: Fleet) -> None:
    fleet_a.min_independent_sessions = 2
    fleet_a.save()
    claim = _propose(fleet_a)
    response = _act(as_mod, claim, "promote")
    assert "1 independent session(s); the fleet needs 2" in _messages(response)[0]
    claim.refresh_from_db()
    assert claim.status == "proposed"


def test_a_second_promote_is_told_someone_got_there_first(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    _act(as_mod, claim, "promote")
    again = _act(as_mod, claim, "promote")
    assert (
        _messages(again)[-1] == f"Someone got there first: {claim.public_id} is already promoted."
    )
    assert claim.events.filter(kind="promoted").count() == 1


def test_it_rejects_only_with_a_reason(as_mod: Client, fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    blank = _act(as_mod, claim, "reject", reason="   ")
    assert "reason: This field is required." in _messages(blank)[0]
    claim.refresh_from_db()
    assert claim.status == "proposed"
    done = _act(as_mod, claim, "reject", reason="not what the log says")
    assert done["Location"] == QUEUE
    claim.refresh_from_db()
    assert claim.status == "rejected"
    assert claim.events.get(kind="rejected").note == "not what the log says"


def test_it_edits_the_text_keeping_the_original(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    _act(as_mod, claim, "edit", text="pytest -x stops after one failure", note="tighter")
    claim.refresh_from_db()
    assert (claim.text, claim.status) == ("pytest -x stops after one failure", "proposed")
    event = claim.events.get(kind="edited")
    assert event.data["original"] == "pytest -x stops at the first failure"
    assert "pytest -x stops at the first failure" in _page(as_mod, claim)  # in the history


def test_it_edits_and_promotes_in_one_click(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    response = _act(as_mod, claim, "edit", text="reworded", and_promote="1")
    assert response["Location"] == QUEUE
    claim.refresh_from_db()
    assert (claim.text, claim.status) == ("reworded", "promoted")
    assert list(claim.events.values_list("kind", flat=True)) == ["proposed", "edited", "promoted"]


def test_an_edit_cannot_smuggle_a_secret_into_the_text(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    _act(as_mod, claim, "edit", text=f"use {TOKEN}", and_promote="1")
    claim.refresh_from_db()
    assert TOKEN not in claim.text  # scrubbed by edit_claim; the redaction marker remains


def test_it_merges_into_another_claim_as_corroboration(as_mod: Client, fleet_a: Fleet) -> None:
    target = _propose(fleet_a, n=1)
    dup = _propose(fleet_a, n=2, text="pytest's -x flag halts on first failure")
    response = _act(as_mod, dup, "merge", into=target.public_id)
    assert "as corroboration (2 independent sessions now)" in _messages(response)[0]
    dup.refresh_from_db()
    target.refresh_from_db()
    assert (dup.status, target.status, target.independent_sessions) == ("rejected", "proposed", 2)
    assert dup.events.get(kind="rejected").data["merged_into"] == target.public_id


@pytest.mark.parametrize("into", ["cc-99", "nonsense", "self"])
def test_it_refuses_to_merge_into_a_claim_that_is_not_there(
    as_mod: Client, fleet_a: Fleet, into: str
) -> None:
    claim = _propose(fleet_a)
    response = _act(as_mod, claim, "merge", into=claim.public_id if into == "self" else into)
    assert "No other claim" in _messages(response)[0]
    claim.refresh_from_db()
    assert claim.status == "proposed"


def test_it_refuses_to_merge_into_a_rejected_claim(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    dead = moderation.reject_claim(_propose(fleet_a, n=1), by=fleet_mod, reason="wrong")
    claim = _propose(fleet_a, n=2, text="another")
    response = _act(as_mod, claim, "merge", into=dead.public_id)
    assert "is rejected; merge into a live claim" in _messages(response)[0]


def test_it_contests_with_a_note_and_keeps_the_status(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    assert "note: This field is required." in _messages(_act(as_mod, claim, "contest"))[-1]
    _act(as_mod, claim, "contest", note="flaky on CI")
    claim.refresh_from_db()
    assert (claim.status, claim.contested) == ("promoted", True)
    assert claim.events.get(kind="contested").note == "flaky on CI"


def test_it_retracts_with_a_note_and_a_retracted_claim_cannot_be_promoted(
    as_mod: Client, fleet_a: Fleet
) -> None:
    claim = _propose(fleet_a)
    _act(as_mod, claim, "retract", note="the log was from a fork")
    claim.refresh_from_db()
    assert claim.status == "retracted"
    response = _act(as_mod, claim, "promote")
    assert "was retracted; it cannot be promoted" in _messages(response)[-1]
    claim.refresh_from_db()
    assert claim.status == "retracted"


def test_a_decided_claim_shows_no_decision_buttons(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = moderation.reject_claim(_propose(fleet_a), by=fleet_mod, reason="no")
    page = _page(as_mod, claim)
    assert 'id="promote-form"' not in page and 'id="contest-form"' not in page


def test_actions_answer_only_posts_and_known_names(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    url = reverse("admin:claims_claim_moderate", args=(claim.pk, "promote"))
    assert as_mod.get(url).status_code == 405
    assert _act(as_mod, claim, "delete").status_code == 404
    assert _act(as_mod, claim, "promote").status_code == 302


# Bulk -----------------------------------------------------------------------------------


def _bulk(client: Client, action: str, claims: list[Claim], **extra: str) -> HttpResponse:
    data = {"action": action, "_selected_action": [str(c.pk) for c in claims], **extra}
    return client.post(QUEUE, data)


def test_bulk_promote_asks_for_confirmation_first(as_mod: Client, fleet_a: Fleet) -> None:
    claims = _many(fleet_a, 3)
    claims[1].evidence.update(excerpt=f"token {TOKEN}")
    response = _bulk(as_mod, "promote_selected", claims)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Promote 3 claim(s)?" in page and "1 of those listed will be refused" in page
    assert Claim.objects.filter(status="promoted").count() == 0


def test_bulk_promote_reports_what_was_done_and_what_was_refused(
    as_mod: Client, fleet_a: Fleet
) -> None:
    claims = _many(fleet_a, 3)
    claims[1].evidence.update(excerpt=f"token {TOKEN}")
    response = _bulk(as_mod, "promote_selected", claims, post="yes")
    assert response.status_code == 302
    (message,) = _messages(response)
    assert message.startswith(f"Promoted 2; 1 refused: {claims[1].public_id} cannot be promoted")
    assert set(Claim.objects.values_list("status", flat=True)) == {"promoted", "proposed"}
    assert _queue_ids(as_mod) == [claims[1].public_id]


def test_bulk_reject_needs_a_reason(as_mod: Client, fleet_a: Fleet) -> None:
    claims = _many(fleet_a, 2)
    page = _bulk(as_mod, "reject_selected", claims, post="yes", reason="")
    assert page.status_code == 200 and "This field is required" in page.content.decode()
    assert not Claim.objects.filter(status="rejected").exists()
    done = _bulk(as_mod, "reject_selected", claims, post="yes", reason="noise")
    assert _messages(done) == ["Rejected 2."]
    assert ClaimEvent.objects.filter(kind="rejected", note="noise").count() == 2


def test_bulk_promote_of_already_decided_claims_says_so(
    as_mod: Client, fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    response = as_mod.post(
        "/admin/claims/claim/",
        {"action": "promote_selected", "_selected_action": [claim.pk], "post": "yes"},
    )
    assert _messages(response) == [f"Promoted 0; 1 refused: {claim.public_id} is already promoted"]


# The form itself ------------------------------------------------------------------------


def test_posting_status_to_the_change_form_changes_nothing(as_mod: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    url = reverse("admin:claims_claim_change", args=(claim.pk,))
    forged = {"text": "new text", "type": "fact", "subject": "x", "status": "promoted"}
    response = as_mod.post(
        url, {**forged, "scope": "fleet", "promoted_at": "2026-01-01", "_save": "1"}
    )
    assert response.status_code == 403
    claim.refresh_from_db()
    assert (claim.status, claim.scope, claim.text, claim.promoted_at) == (
        "proposed",
        "agent",
        "pytest -x stops at the first failure",
        None,
    )


def test_even_a_superuser_cannot_edit_add_or_delete_claims_by_form(
    client: Client, fleet_a: Fleet
) -> None:
    root = User.objects.create_superuser("root", password="x")
    client.force_login(root)
    claim = _propose(fleet_a)
    change = reverse("admin:claims_claim_change", args=(claim.pk,))
    assert client.post(change, {"status": "promoted", "_save": "1"}).status_code == 403
    assert client.get(reverse("admin:claims_claim_add")).status_code == 403
    assert client.post(reverse("admin:claims_claim_delete", args=(claim.pk,))).status_code == 403
    claim.refresh_from_db()
    assert claim.status == "proposed"
    assert client.get(QUEUE).status_code == 200
