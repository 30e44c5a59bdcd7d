"""Handoffs over REST: the pickup gate and compare-and-swap."""

from __future__ import annotations

import pytest

from fleet import handoffs, rendering
from fleet.models import Agent, Handoff
from tests.fleet.conftest import ApiAs, World


def _url(world: World, action: str = "") -> str:
    return f"/api/v1/fleets/{world.fleet.slug}/handoffs/{world.handoff.pk}{action}"


def test_the_pickup_gate_answers_without_transitioning_an_agent_written_handoff(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    response = api_as(bo).post(_url(world, "/pickup"), {"version": 1}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["picked_up"], body["needs_confirmation"]) == (False, True)
    assert "confirm" in body["message"]
    world.handoff.refresh_from_db()
    assert (world.handoff.state, world.handoff.version) == ("pending", 1)


def test_it_picks_up_with_confirm_and_bumps_the_version(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    body = {"version": 1, "confirm": True}
    response = api_as(bo).post(_url(world, "/pickup"), body, format="json")
    assert response.json()["picked_up"] is True
    assert response.json()["handoff"]["state"] == "picked_up"
    assert response.json()["handoff"]["picked_up_by_id"] == "bo"
    assert response.json()["handoff"]["version"] == 2


def test_the_list_filters_by_state_and_names_the_states_of_a_bad_one(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    client = api_as(bo)
    url = f"/api/v1/fleets/{world.fleet.slug}/handoffs"
    assert [h["id"] for h in client.get(f"{url}?state=pending").json()["results"]] == [
        world.handoff.pk]
    assert client.get(f"{url}?state=cleared").json()["results"] == []
    bad = client.get(f"{url}?state=lost")
    assert bad.status_code == 400
    assert bad.json() == {"state": [f"one of {', '.join(Handoff.State.values)}"]}


def test_an_operator_handoff_needs_no_confirmation(api_as: ApiAs, world: World, bo: Agent) -> None:
    operator = api_as(world.fleet, "operator")
    made = operator.post(
        f"/api/v1/fleets/{world.fleet.slug}/handoffs",
        {"agent_id": "ada", "summary": "please finish the docs"},
        format="json",
    ).json()
    assert made["source_trust"] == "operator"
    url = f"/api/v1/fleets/{world.fleet.slug}/handoffs/{made['id']}/pickup"
    assert api_as(bo).post(url, {"version": 1}, format="json").json()["picked_up"] is True


def test_a_stale_version_is_409_with_the_current_version(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    handoffs.update_handoff(world.handoff, expected_version=1, summary="edited elsewhere")
    body = {"version": 1, "confirm": True}
    response = api_as(bo).post(_url(world, "/pickup"), body, format="json")
    assert response.status_code == 409
    assert response.json()["current_version"] == 2
    assert response.json()["expected_version"] == 1
    clear = api_as(bo).post(_url(world, "/clear"), {"version": 1}, format="json")
    assert (clear.status_code, clear.json()["current_version"]) == (409, 2)


def test_picking_up_a_picked_up_handoff_is_409(api_as: ApiAs, world: World, bo: Agent) -> None:
    client = api_as(bo)
    client.post(_url(world, "/pickup"), {"version": 1, "confirm": True}, format="json")
    again = client.post(_url(world, "/pickup"), {"version": 2, "confirm": True}, format="json")
    assert again.status_code == 409
    assert again.json()["current_version"] == 2


def test_a_handoff_summary_is_scrubbed_before_it_is_stored(api_as: ApiAs, world: World) -> None:
    secret = "AKIAIOSFODNN7EXAMPLE"
    response = api_as(world.ada).post(
        f"/api/v1/fleets/{world.fleet.slug}/handoffs",
        {"summary": f"deploy key is {secret}", "next_steps": f"use {secret}"},
        format="json",
    )
    assert response.status_code == 201
    assert not Handoff.objects.filter(summary__contains=secret).exists()
    assert not Handoff.objects.filter(next_steps__contains=secret).exists()


def test_an_agent_token_may_not_speak_for_another_agent(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    response = api_as(world.ada).post(
        f"/api/v1/fleets/{world.fleet.slug}/leases/claim",
        {"agent_id": "bo", "paths": ["src/**"]},
        format="json",
    )
    assert response.status_code == 400
    assert "agent_id" in response.json()


def test_bad_input_is_400_with_field_level_messages(api_as: ApiAs, world: World) -> None:
    response = api_as(world.ada).post(
        f"/api/v1/fleets/{world.fleet.slug}/leases/claim",
        {"paths": [], "ttl_secs": 5},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()) == {"paths", "ttl_secs"}
    escaping = api_as(world.ada).post(
        f"/api/v1/fleets/{world.fleet.slug}/leases/claim", {"paths": ["/etc/**"]}, format="json"
    )
    assert escaping.status_code == 400
    assert "paths" in escaping.json()


def test_lease_list_and_claim_report_contention(api_as: ApiAs, world: World, bo: Agent) -> None:
    base = f"/api/v1/fleets/{world.fleet.slug}"
    api_as(world.ada).post(f"{base}/leases/claim", {"paths": ["src/**"]}, format="json")
    claim = api_as(bo).post(f"{base}/leases/claim", {"paths": ["src/app.py"]}, format="json")
    assert claim.json()["contention"][0]["other_agent_id"] == "ada"
    leases = api_as(bo).get(f"{base}/leases").json()["results"]
    assert {lease["agent_id"]: len(lease["contended_by"]) for lease in leases} == {
        "ada": 1,
        "bo": 1,
    }
    status = api_as(bo).get(f"{base}/status").json()
    assert status["contended_leases"] == 2
    assert {a["agent_id"] for a in status["agents"]} == {"ada", "bo"}


@pytest.mark.django_db(transaction=True)  # each request commits, so its render is asked
def test_a_rest_pickup_and_clear_go_through_fleet_actions_and_ask_for_a_render(
    api_as: ApiAs, world: World, bo: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    monkeypatch.setattr(rendering, "_schedule", asked.append)
    api_as(bo).post(_url(world, "/pickup"), {"version": 1}, format="json")
    assert asked == []  # the gate answered; nothing changed, nothing to render
    response = api_as(bo).post(_url(world, "/pickup"), {"version": 1, "confirm": True},
                               format="json")
    assert response.json()["picked_up"] is True and asked == [world.fleet.pk]
    assert api_as(bo).post(_url(world, "/clear"), {"version": 1},
                           format="json").status_code == 409
    assert asked == [world.fleet.pk]  # a stale version changes nothing
    assert api_as(bo).post(_url(world, "/clear"), {"version": 2},
                           format="json").status_code == 200
    assert asked == [world.fleet.pk, world.fleet.pk]


@pytest.mark.django_db(transaction=True)  # no test transaction: savepoints are the code's own
def test_a_clear_and_a_pickup_read_neither_the_fleet_again_nor_take_a_savepoint(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    """The request has loaded the fleet the handoff was looked up in, and the swap is one
    UPDATE inside the action's transaction: neither needs a statement of its own."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as seen:
        picked = api_as(bo).post(_url(world, "/pickup"), {"version": 1, "confirm": True},
                                 format="json")
        cleared = api_as(bo).post(_url(world, "/clear"), {"version": 2}, format="json")
    assert picked.json()["picked_up"] is True
    assert cleared.status_code == 200 and cleared.json()["version"] == 3
    sql = [q["sql"] for q in seen.captured_queries]
    assert not [q for q in sql if q.startswith("SAVEPOINT")]
    assert not [q for q in sql if 'FROM "fleet_fleet"' in q and "fleet_apitoken" not in q]
    world.handoff.refresh_from_db()
    assert (world.handoff.state, world.handoff.version) == ("cleared", 3)
    assert world.handoff.fleet_id == world.fleet.pk
