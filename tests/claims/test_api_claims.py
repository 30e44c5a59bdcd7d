"""Memory over REST: redaction at ingest, search caps, visibility, moderation by token."""

from __future__ import annotations

import json
from typing import Any

import pytest

from claims.models import Claim, ClaimEvent, Evidence
from fleet.models import Fleet
from tests.claims.witness import seen
from tests.fleet.conftest import ApiAs, World

SECRET = "sk-ant-api03-" + "x7Y9" * 20


def _base(world: World) -> str:
    return f"/api/v1/fleets/{world.fleet.slug}"


def test_a_secret_in_a_claim_or_its_evidence_never_reaches_the_database(
    api_as: ApiAs, world: World
) -> None:
    body = {
        "text": f"export ANTHROPIC_API_KEY={SECRET} before running the evals",
        "type": "procedure",
        "subject": "evals",
        "evidence": [{"session_id": "s-2", "message_id": "m-2", "excerpt": f"key {SECRET}"}],
    }
    response = api_as(world.ada).post(f"{_base(world)}/claims", body, format="json")
    assert response.status_code == 201
    assert response.json()["redacted"]
    assert SECRET not in response.content.decode()
    assert not Claim.objects.filter(text__contains=SECRET[:24]).exists()
    assert not Evidence.objects.filter(excerpt__contains=SECRET[:24]).exists()
    assert Claim.objects.filter(subject="evals").count() == 1


def test_a_duplicate_proposal_corroborates_only_from_a_verified_session(
    api_as: ApiAs, world: World
) -> None:
    """Issue 13: the same text from a session the fleet never saw is a new proposal in the
    queue (labelled a duplicate), not a corroboration; from a seen session it corroborates."""
    body = {
        "text": world.promoted.text.upper(),
        "type": "fact",
        "subject": "pytest",
        "evidence": [{"session_id": "s-3", "message_id": "m-3"}],
    }
    before = world.promoted.independent_sessions
    response = api_as(world.ada).post(f"{_base(world)}/claims", body, format="json")
    assert response.status_code == 201
    assert response.json()["claim"]["status"] == "proposed"
    world.promoted.refresh_from_db()
    assert world.promoted.independent_sessions == before
    seen(world.fleet, "s-4", agent=world.ada)
    body["evidence"] = [{"session_id": "s-4", "message_id": "m-4"}]
    response = api_as(world.ada).post(f"{_base(world)}/claims", body, format="json")
    assert response.status_code == 200
    assert (response.json()["created"], response.json()["claim"]["id"]) == (
        False,
        world.promoted.public_id,
    )


def test_a_proposal_without_evidence_is_400(api_as: ApiAs, world: World) -> None:
    body = {"text": "a", "type": "fact", "subject": "b", "evidence": []}
    response = api_as(world.ada).post(f"{_base(world)}/claims", body, format="json")
    assert response.status_code == 400
    assert "evidence" in response.json()
    unknown = {**body, "evidence": [{"session_id": "s", "message_id": "m", "url": "x"}]}
    assert (
        api_as(world.ada).post(f"{_base(world)}/claims", unknown, format="json").status_code == 400
    )


def test_a_proposal_with_a_status_is_refused_naming_it_and_prose_is_free(
    api_as: ApiAs, world: World
) -> None:
    cite = [{"session_id": "s", "message_id": "m"}]
    body = {"text": "The cache is promoted to the CDN nightly.", "type": "fact",
            "subject": "cdn", "evidence": cite}
    with_status = api_as(world.ada).post(f"{_base(world)}/claims", {**body, "status": "promoted"},
                                         format="json")
    assert with_status.status_code == 400 and "'status'" in json.dumps(with_status.json())
    assert api_as(world.ada).post(f"{_base(world)}/claims", body, format="json").status_code == 201


def test_search_caps_rows_and_says_truncated(api_as: ApiAs, world: World, mod: Any) -> None:
    from claims import moderation

    for i in range(210):
        moderation.propose_claim(
            world.fleet,
            text=f"flaky test number {i} in the suite",
            type="gotcha",
            subject="flaky",
            evidence=[{"session_id": f"s{i}", "message_id": "m"}],
        )
    client = api_as(world.fleet, "operator")
    few = client.get(f"{_base(world)}/claims/search?q=flaky&k=5").json()
    assert (len(few["results"]), few["truncated"]) == (5, True)
    capped = client.get(f"{_base(world)}/claims/search?q=flaky&k=100000").json()
    assert (len(capped["results"]), capped["truncated"]) == (200, True)
    default = client.get(f"{_base(world)}/claims/search?q=flaky").json()
    assert len(default["results"]) == 10


def test_non_operators_see_only_promoted_claims(api_as: ApiAs, world: World) -> None:
    agent = api_as(world.ada)
    assert agent.get(f"{_base(world)}/claims/{world.proposed.public_id}").status_code == 404
    listed = agent.get(f"{_base(world)}/claims").json()["results"]
    assert [c["id"] for c in listed] == [world.promoted.public_id]
    operator = api_as(world.fleet, "operator")
    assert operator.get(f"{_base(world)}/claims/{world.proposed.public_id}").status_code == 200


def test_the_list_filters_by_status_and_type_and_names_the_choices_of_a_bad_one(
    api_as: ApiAs, world: World
) -> None:
    operator = api_as(world.fleet, "operator")

    def ids(query: str) -> list[str]:
        return [c["id"] for c in operator.get(f"{_base(world)}/claims?{query}").json()["results"]]

    assert ids("status=proposed") == [world.proposed.public_id]
    assert ids("status=promoted&type=fact") == [world.promoted.public_id]
    assert ids("status=promoted&type=decision") == []
    bad = operator.get(f"{_base(world)}/claims?type=rumour")
    assert bad.status_code == 400
    assert bad.json() == {"type": [f"one of {', '.join(Claim.Type.values)}"]}


@pytest.mark.parametrize(("mode", "enabled"), [("shadow", True), ("off", False)])
def test_search_follows_the_memory_mode(
    api_as: ApiAs, world: World, mode: str, enabled: bool
) -> None:
    Fleet.objects.filter(pk=world.fleet.pk).update(memory_mode=mode)
    body = api_as(world.ada).get(f"{_base(world)}/claims/search?q=pytest").json()
    assert (body["enabled"], body["results"]) == (enabled, [])


def test_get_shows_evidence_and_events(api_as: ApiAs, world: World) -> None:
    body = api_as(world.ada).get(f"{_base(world)}/claims/{world.promoted.public_id}").json()
    assert body["evidence"][0]["session_id"] == "s-1"
    assert [e["kind"] for e in body["events"]] == ["proposed", "promoted"]
    assert body["events"][1]["actor"] == "user:mod"


def test_an_operator_token_promotes_through_the_gate(api_as: ApiAs, world: World) -> None:
    client = api_as(world.fleet, "operator")
    url = f"{_base(world)}/claims/{world.proposed.public_id}/promote"
    response = client.post(url, {"note": "checked"}, format="json")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["scope"]) == ("promoted", "fleet")
    event = ClaimEvent.objects.filter(claim=world.proposed, kind="promoted").get()
    assert event.actor_token == client.token  # type: ignore[attr-defined]
    assert client.post(url, {}, format="json").status_code == 409  # already decided


def test_the_gate_refuses_a_token_what_it_refuses_a_person(api_as: ApiAs, world: World) -> None:
    Fleet.objects.filter(pk=world.fleet.pk).update(min_independent_sessions=2)
    client = api_as(world.fleet, "operator")
    url = f"{_base(world)}/claims/{world.proposed.public_id}"
    refused = client.post(f"{url}/promote", {}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (409, "gate_refused")
    assert "independent session" in refused.json()["detail"]
    assert client.post(f"{url}/retract", {"note": "wrong"}, format="json").status_code == 200
    again = client.post(f"{url}/promote", {}, format="json")
    assert "retracted" in again.json()["detail"]
    world.proposed.refresh_from_db()
    assert world.proposed.status == "retracted"


def test_reject_needs_a_reason(api_as: ApiAs, world: World) -> None:
    url = f"{_base(world)}/claims/{world.proposed.public_id}/reject"
    response = api_as(world.fleet, "operator").post(url, {}, format="json")
    assert response.status_code == 400
    assert "reason" in response.json()


def test_the_timeline_lists_a_subjects_claim_events(api_as: ApiAs, world: World) -> None:
    body = api_as(world.ada).get(f"{_base(world)}/timeline?subject=pytest").json()
    assert [e["kind"] for e in body["results"]] == ["promoted", "proposed"]
    assert api_as(world.ada).get(f"{_base(world)}/timeline").status_code == 400


def test_search_results_say_when_a_claim_is_possibly_stale(api_as: ApiAs, world: World) -> None:
    from claims.models import Claim

    Claim.objects.filter(pk=world.promoted.pk).update(staleness=0.5)
    client = api_as(world.fleet, "operator")
    words = world.promoted.text.split()[:3]
    found = client.get(f"{_base(world)}/claims/search", {"q": " ".join(words)}).json()["results"]
    row = next(r for r in found if r["id"] == world.promoted.public_id)
    assert row["stale"] is True


def test_an_operator_supersedes_and_the_old_claim_leaves_search(
    api_as: ApiAs, world: World
) -> None:
    from claims import moderation

    new = moderation.propose_claim(
        world.fleet,
        text="pytest -x no longer stops at the first failure with --sw",
        type="fact",
        subject="pytest",
        evidence=[{"session_id": "s-1", "message_id": "m-new"}],
        by_agent=world.ada,
    ).claim
    url = f"{_base(world)}/claims/{world.promoted.public_id}/supersede"
    body = {"by": new.public_id, "note": "changed in pytest 9"}
    assert api_as(world.ada).post(url, body, format="json").status_code == 403
    response = api_as(world.fleet, "operator").post(url, body, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["superseded_by"] == new.public_id
    again = api_as(world.fleet, "operator").post(url, body, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "already_decided")
    found = api_as(world.ada).get(f"{_base(world)}/claims/search", {"q": "pytest failure"})
    ids = [c["id"] for c in found.json()["results"]]
    assert new.public_id in ids and world.promoted.public_id not in ids
    timeline = api_as(world.ada).get(f"{_base(world)}/timeline", {"subject": "pytest"}).json()
    assert "superseded" in [e["kind"] for e in timeline["results"]]


def test_an_operator_sets_and_clears_valid_until(api_as: ApiAs, world: World) -> None:
    url = f"{_base(world)}/claims/{world.promoted.public_id}/valid-until"
    operator = api_as(world.fleet, "operator")
    past = "2020-01-01T00:00:00Z"
    assert operator.post(url, {"valid_until": past}, format="json").status_code == 200
    found = api_as(world.ada).get(f"{_base(world)}/claims/search", {"q": "pytest"}).json()
    assert world.promoted.public_id not in [c["id"] for c in found["results"]]
    assert operator.post(url, {"valid_until": "soon"}, format="json").status_code == 400
    assert operator.post(url, {"valid_until": None}, format="json").status_code == 200
    found = api_as(world.ada).get(f"{_base(world)}/claims/search", {"q": "pytest"}).json()
    assert world.promoted.public_id in [c["id"] for c in found["results"]]


def test_evidence_says_which_sessions_are_verified(api_as: ApiAs, world: World) -> None:
    from claims import moderation

    claim = moderation.propose_claim(
        world.fleet,
        text="the staging db resets on sundays",
        type="fact",
        subject="staging",
        evidence=[
            {"session_id": "s-1", "message_id": "m-1"},
            {"session_id": "typed-by-agent", "message_id": "m-2"},
        ],
    ).claim
    body = api_as(world.fleet, "operator").get(f"{_base(world)}/claims/{claim.public_id}").json()
    assert {e["session_id"]: e["verified"] for e in body["evidence"]} == {
        "s-1": True,
        "typed-by-agent": False,
    }
    assert body["independent_sessions"] == 1
