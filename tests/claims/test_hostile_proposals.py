"""Hostile proposals (issue 13): none raises a promoted claim's count or closes a proposal
without a moderator, and the contradictions are labelled as conflicts.

Real Postgres, the real embedding model (claims.tasks.embed_pending), the real moderation
functions. Each case ends with what a moderator would see in the queue.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from claims import moderation, search, tasks
from claims.models import Claim, ClaimEvent
from fleet.models import Agent, Fleet, FleetModerator
from tests.claims.witness import seen

MOCK = "Integration tests need NC_R1_MOCK=1 set in the environment."
PYTHON = "The CI image runs Python 3.11 for the test suite."


def _propose(fleet: Fleet, text: str, *sessions: str, agent: Agent | None = None, msg: str = "m"):
    evidence = [{"session_id": s, "message_id": f"{msg}-{s}"} for s in sessions]
    return moderation.propose_claim(
        fleet, text=text, type="gotcha", subject="tests", evidence=evidence, by_agent=agent
    )


@pytest.fixture
def moderator(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


@pytest.fixture
def promoted(fleet_a: Fleet, ada: Agent, moderator: User) -> dict[str, Claim]:
    """Two promoted claims backed by sessions the fleet saw, embedded."""
    seen(fleet_a, "s1", "s2", agent=ada)
    mock = _propose(fleet_a, MOCK, "s1", agent=ada).claim
    python = _propose(fleet_a, PYTHON, "s2", agent=ada).claim
    tasks.embed_pending()
    for claim in (mock, python):
        moderation.promote_claim(claim, by=moderator)
        claim.refresh_from_db()
        assert claim.independent_sessions == 1
    return {"mock": mock, "python": python}


def _state(claim: Claim) -> tuple[Any, ...]:
    claim.refresh_from_db()
    return (
        claim.status,
        claim.independent_sessions,
        claim.evidence.count(),
        claim.events.count(),
        claim.superseded_by_id,
    )


def _nobody_closed_anything(fleet: Fleet) -> None:
    assert not ClaimEvent.objects.filter(
        claim__fleet=fleet,
        kind__in=("rejected", "retracted", "superseded"),
        actor_user=None,
        actor_token=None,
    ).exists()


@pytest.mark.parametrize(
    ("key", "text", "relation", "reason"),
    [
        (
            "mock",
            "Integration tests do not need NC_R1_MOCK=1 set in the environment.",
            "conflict",
            "negation: not",
        ),
        (
            "mock",
            "Integration tests need NC_R2_MOCK=1 set in the environment.",
            "conflict",
            "identifier: NC_R2_MOCK=1",
        ),
        (
            "python",
            "The CI image runs Python 3.12 for the test suite.",
            "conflict",
            "version: 3.12",
        ),
    ],
    ids=["negated", "another-variable", "another-version"],
)
def test_a_near_contradiction_stays_proposed_labelled_a_conflict(
    fleet_a: Fleet,
    ada: Agent,
    promoted: dict[str, Claim],
    key: str,
    text: str,
    relation: str,
    reason: str,
) -> None:
    old = promoted[key]
    before = _state(old)
    seen(fleet_a, "s9", agent=ada)  # a real session, so only the label stands in its way
    new = _propose(fleet_a, text, "s9", agent=ada)
    tasks.embed_pending()
    assert new.created
    claim = Claim.objects.get(pk=new.claim.pk)
    assert claim.status == "proposed"
    assert (claim.near_claim_id, claim.near_relation) == (old.pk, relation)
    assert claim.near_similarity >= 0.85
    assert _state(old) == before  # count, evidence and history untouched
    from claims.conflicts import compare

    assert reason in compare(old.text, claim.text).reasons
    _nobody_closed_anything(fleet_a)


def test_invented_session_ids_count_for_nothing_and_touch_nothing(
    fleet_a: Fleet, ada: Agent, promoted: dict[str, Claim], moderator: User
) -> None:
    old = promoted["mock"]
    before = _state(old)
    same_text = _propose(fleet_a, MOCK.upper(), "made-up-1", "made-up-2", "made-up-3", agent=ada)
    assert same_text.created and same_text.claim.independent_sessions == 0
    assert (same_text.claim.near_claim_id, same_text.claim.near_relation) == (old.pk, "duplicate")
    new_text = _propose(fleet_a, "Flaky tests pass on retry.", "x-1", "x-2", "x-3", agent=ada)
    assert new_text.claim.independent_sessions == 0
    assert _state(old) == before
    with pytest.raises(moderation.GateRefused, match="0 independent session"):
        moderation.promote_claim(new_text.claim, by=moderator)
    _nobody_closed_anything(fleet_a)


def test_a_citation_of_another_fleets_session_is_unverified(
    fleet_a: Fleet, fleet_b: Fleet, ada: Agent, cy: Agent, promoted: dict[str, Claim]
) -> None:
    seen(fleet_b, "b-session", agent=cy)
    old = promoted["mock"]
    before = _state(old)
    again = _propose(fleet_a, MOCK, "b-session", agent=ada)
    assert again.created and again.claim.independent_sessions == 0
    assert again.claim.status == "proposed"
    assert _state(old) == before


def test_the_same_text_from_the_same_session_twice_is_not_corroboration(
    fleet_a: Fleet, ada: Agent, promoted: dict[str, Claim]
) -> None:
    old = promoted["mock"]
    before = _state(old)
    replay = _propose(fleet_a, MOCK, "s1", agent=ada)  # the very citation it already has
    assert (replay.claim.pk, replay.created, replay.evidence_added) == (old.pk, False, 0)
    other_message = _propose(fleet_a, MOCK, "s1", agent=ada, msg="later")
    assert other_message.created and other_message.claim.status == "proposed"
    assert other_message.claim.near_claim_id == old.pk
    assert _state(old) == before
    fresh = _propose(fleet_a, "Snapshots are rendered every minute.", "s1", agent=ada).claim
    twice = _propose(fleet_a, "Snapshots are rendered every minute.", "s1", agent=ada, msg="2")
    fresh.refresh_from_db()
    assert twice.created and fresh.independent_sessions == 1 and fresh.evidence.count() == 1
    _nobody_closed_anything(fleet_a)


def test_the_only_automatic_change_is_a_verified_other_session_and_it_is_in_the_history(
    fleet_a: Fleet, bo: Agent, promoted: dict[str, Claim]
) -> None:
    old = promoted["mock"]
    seen(fleet_a, "s-bo", agent=bo)
    again = _propose(
        fleet_a, "  integration tests need nc_r1_mock=1 set in the environment.", "s-bo", agent=bo
    )
    assert (again.claim.pk, again.created) == (old.pk, False)
    old.refresh_from_db()
    assert old.independent_sessions == 2
    event = old.events.latest("at")
    assert (event.kind, event.data["automatic"], event.actor_agent) == ("corroborated", True, bo)
    assert (event.data["sessions_before"], event.data["sessions_after"]) == (1, 2)


def test_a_moderator_supersedes_the_old_claim_and_it_leaves_search(
    fleet_a: Fleet, ada: Agent, promoted: dict[str, Claim], moderator: User
) -> None:
    old = promoted["mock"]
    seen(fleet_a, "s9", agent=ada)
    new = _propose(
        fleet_a, "Integration tests do not need NC_R1_MOCK=1 any more.", "s9", agent=ada
    ).claim
    done = moderation.supersede_claim(old, by=moderator, new=new, note="mock removed in 2.0")
    new.refresh_from_db()
    assert done.superseded_by == new and new.status == "promoted"
    assert done.events.latest("at").kind == "superseded"
    found = search.search_claims(fleet_a, "NC_R1_MOCK", k=10, statuses=["promoted"])
    found_ids = [c.pk for c in found.claims]
    assert new.pk in found_ids and old.pk not in found_ids
    with pytest.raises(moderation.AlreadyDecided):
        moderation.supersede_claim(old, by=moderator, new=new)


def test_supersede_with_a_claim_the_gate_refuses_changes_nothing(
    fleet_a: Fleet, ada: Agent, promoted: dict[str, Claim], moderator: User
) -> None:
    old = promoted["mock"]
    new = _propose(fleet_a, "NC_R1_MOCK is gone.", "never-seen", agent=ada).claim
    with pytest.raises(moderation.GateRefused):
        moderation.supersede_claim(old, by=moderator, new=new)
    old.refresh_from_db()
    new.refresh_from_db()
    assert old.superseded_by_id is None and new.status == "proposed"


def test_valid_until_takes_a_claim_out_of_search_once_past(
    fleet_a: Fleet, promoted: dict[str, Claim], moderator: User, mod: User
) -> None:
    claim = promoted["python"]
    moderation.set_valid_until(claim, by=moderator, until=timezone.now() - timedelta(seconds=1))
    assert claim.events.latest("at").kind == "valid_until"
    def found() -> list[int]:
        return [c.pk for c in search.search_claims(fleet_a, "Python 3.11", k=10).claims]

    assert claim.pk not in found()
    moderation.set_valid_until(claim, by=moderator, until=None)
    assert claim.pk in found()


def test_a_person_outside_the_fleet_can_neither_supersede_nor_expire(
    fleet_a: Fleet, ada: Agent, promoted: dict[str, Claim], django_user_model: Any
) -> None:
    from django.contrib.auth.models import Permission

    outsider = django_user_model.objects.create_user("out", is_staff=True)
    outsider.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    with pytest.raises(moderation.GateRefused):
        moderation.set_valid_until(promoted["python"], by=outsider, until=timezone.now())
    with pytest.raises(moderation.GateRefused):
        moderation.supersede_claim(promoted["mock"], by=outsider, new=promoted["python"])
