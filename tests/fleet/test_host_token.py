"""The host token: one credential per agent host, relaying the lines of the agents listed
for it, checked line by line, and able to do nothing but what an agent host's sync does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.urls import URLPattern, URLResolver, get_resolver

from claims.models import Claim
from fleet import tokens
from fleet.models import Activity, Agent, ApiToken, Fleet, InboxEvent
from fleet.permissions import HOST, MODERATE
from tests.fleet.conftest import ApiAs, World, ndjson, spool_line


def _post(client: Any, fleet: Fleet, body: bytes) -> Any:
    return client.post(
        f"/api/v1/fleets/{fleet.slug}/spool", data=body, content_type="application/x-ndjson"
    )


def _inbox_agents(fleet: Fleet) -> list[str]:
    rows = InboxEvent.objects.filter(fleet=fleet).order_by("id")
    return [json.loads(bytes(row.line))["agent"] for row in rows]


@pytest.fixture
def dee(fleet_a: Fleet) -> Agent:
    """An agent of fleet A that runs on another host."""
    return Agent.objects.create(fleet=fleet_a, agent_id="dee", host="laptop-dee")


def test_it_relays_its_agents_lines_and_refuses_each_other_line_with_its_reason(
    api_as: ApiAs, world: World, bo: Agent, dee: Agent, cy: Agent
) -> None:
    fleet = world.fleet.slug
    host = api_as(world.fleet, "host", relays=[world.ada, bo])
    mine = [spool_line(fleet, "ada"), spool_line(fleet, "bo")]
    theirs = [
        spool_line(fleet, "dee"),  # this fleet's agent, registered for another host
        spool_line(fleet, "cy"),  # another fleet's agent
        spool_line(fleet, "zed"),  # nobody's
        spool_line("fleet-b", "cy"),  # a line for another fleet altogether
    ]
    body = ndjson(theirs[0], mine[0], theirs[1], theirs[2], mine[1], theirs[3])

    response = _post(host, world.fleet, body)

    assert response.status_code == 200, response.content
    result = response.json()
    assert result["accepted"] == [mine[0]["id"], mine[1]["id"]]
    refused = {r["line"]: r for r in result["rejected"]}
    assert sorted(refused) == [1, 3, 4, 6]
    assert [refused[n]["id"] for n in (1, 3, 4, 6)] == [e["id"] for e in theirs]
    assert "dee is not registered for host token" in refused[1]["reason"]
    for n, name in ((3, "cy"), (4, "zed")):  # the same words: nothing learnt of fleet B
        assert refused[n]["reason"].startswith(f"agent {name} is not an agent of this fleet")
    assert "does not match the URL's fleet" in refused[6]["reason"]
    assert _inbox_agents(world.fleet) == ["ada", "bo"]
    received = Activity.objects.filter(fleet=world.fleet, verb="spool.received")
    assert sorted(received.values_list("target_id", flat=True)) == sorted(e["id"] for e in mine)


def test_a_batch_of_only_refused_lines_is_400_and_stores_nothing(
    api_as: ApiAs, world: World, dee: Agent
) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    lines = [spool_line(world.fleet.slug, "dee"), spool_line(world.fleet.slug, "nobody")]
    response = _post(host, world.fleet, ndjson(*lines))
    assert response.status_code == 400
    assert [r["id"] for r in response.json()["rejected"]] == [e["id"] for e in lines]
    assert not InboxEvent.objects.exists()


def test_a_retried_line_is_accepted_again_and_stored_once(api_as: ApiAs, world: World) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    line = spool_line(world.fleet.slug, "ada")
    assert _post(host, world.fleet, ndjson(line)).json()["accepted"] == [line["id"]]
    assert _post(host, world.fleet, ndjson(line)).json()["accepted"] == [line["id"]]
    assert InboxEvent.objects.count() == 1


def test_the_list_is_the_operators_and_a_change_takes_effect_at_once(
    api_as: ApiAs, world: World, bo: Agent, mod: Any
) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada, bo])
    token = host.token
    tokens.set_relays(token, [world.ada], by=mod)  # bo moved to another host
    line = spool_line(world.fleet.slug, "bo")
    (refused,) = _post(host, world.fleet, ndjson(line)).json()["rejected"]
    assert "bo is not registered for host token" in refused["reason"]
    change = Activity.objects.get(verb="token.relays_changed", target_id=str(token.pk))
    assert (change.data["added"], change.data["removed"], change.user) == ([], ["bo"], mod)


def test_an_agent_reporting_the_hosts_name_does_not_join_its_list(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    """Agent.host is what an agent says in its heartbeat: it never grants a relay."""
    host = api_as(world.fleet, "host", relays=[world.ada])
    beat = api_as(bo).post(
        f"/api/v1/fleets/{world.fleet.slug}/agents/heartbeat",
        {"runtime": "codex", "host": host.token.name},
        format="json",
    )
    assert beat.status_code == 200
    assert _post(host, world.fleet, ndjson(spool_line(world.fleet.slug, "bo"))).status_code == 400


def test_a_host_token_cannot_heartbeat_an_agent_onto_its_host(
    api_as: ApiAs, world: World, bo: Agent
) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    beat = host.post(
        f"/api/v1/fleets/{world.fleet.slug}/agents/heartbeat",
        {"agent_id": "bo", "host": host.token.name},
        format="json",
    )
    assert beat.status_code == 403
    bo.refresh_from_db()
    assert bo.host == ""


@pytest.mark.parametrize(
    ("role", "agent", "relays", "problem"),
    [
        ("host", "ada", [], "not bound to one agent"),
        ("operator", None, ["ada"], "only a host token"),
        ("agent", "ada", ["ada"], "only a host token"),
        ("host", None, ["cy"], "not in fleet fleet-a"),
    ],
)
def test_it_refuses_a_token_whose_agents_do_not_fit(
    fleet_a: Fleet, ada: Agent, cy: Agent, role: str, agent: str | None, relays: list[str],
    problem: str,
) -> None:
    by_id = {"ada": ada, "cy": cy}
    with pytest.raises(ValueError, match=problem):
        tokens.issue_token(fleet_a, role=role, name="h", agent=by_id.get(agent or ""),
                           relays=[by_id[r] for r in relays])
    assert not ApiToken.objects.exists()


def test_the_database_holds_a_host_token_to_no_bound_agent(fleet_a: Fleet, ada: Agent) -> None:
    issued = tokens.issue_token(fleet_a, role="host", name="build-1", relays=[ada])
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiToken.objects.filter(pk=issued.token.pk).update(agent=ada)


def _operator_only_routes() -> Iterator[tuple[str, str, str]]:
    """(method, path, action) of every fleet endpoint a host token may not use, read from
    the URL configuration and the views' `roles`: a new endpoint is covered by itself."""
    for route, callback in _walk(get_resolver().url_patterns, ""):
        cls, actions = getattr(callback, "cls", None), getattr(callback, "actions", None)
        if not route.startswith("api/v1/fleets/") or not cls or not actions:
            continue
        roles = getattr(cls, "roles", {})
        for method, action in actions.items():
            if HOST not in roles.get(action, MODERATE):
                yield method, route, action


def _walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


PARAMS = {"<str:fleet>": "fleet-a", "<str:claim_id>": "{proposed}", "<str:pk>": "{h}",
          "<str:session_id>": "s-1", "<str:name>": "roster.json"}


def test_the_route_walk_finds_the_moderation_and_operator_endpoints() -> None:
    found = {action for _, _, action in _operator_only_routes()}
    assert {"promote", "reject", "contest", "retract", "supersede", "merge", "export",
            "flagged", "release", "heartbeat", "status"} <= found
    assert not found & {"upload", "manifest", "file", "delta", "changes"}


def test_every_endpoint_but_syncs_answers_403_to_a_host_token_and_changes_nothing(
    api_as: ApiAs, world: World
) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    routes = list(_operator_only_routes())
    assert len(routes) > 25
    for method, route, action in routes:
        path = route.removeprefix("api/v1/")
        for param, value in PARAMS.items():
            path = path.replace(param, value)
        path = path.format(h=world.handoff.pk, proposed=world.proposed.public_id)
        url = f"/api/v1/{path}"
        response = host.get(url) if method == "get" else host.post(url, {}, format="json")
        assert response.status_code == 403, (method, path, action, response.content[:200])
        assert "host token may not" in response.json()["detail"]
    world.proposed.refresh_from_db()
    assert world.proposed.status == Claim.Status.PROPOSED
    assert InboxEvent.objects.count() == 0


def test_the_health_endpoint_is_403_to_a_host_token(api_as: ApiAs, world: World) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    response = host.get("/api/v1/health")
    assert response.status_code == 403
    assert "host token may not" in response.json()["detail"]


def test_hostile_bodies_from_a_host_token_get_clear_errors_and_store_nothing_wrong(
    api_as: ApiAs, world: World, settings: Any
) -> None:
    host = api_as(world.fleet, "host", relays=[world.ada])
    good = spool_line(world.fleet.slug, "ada")
    mixed = b"\n".join([
        b"\xff\xfe not UTF-8",
        json.dumps(spool_line(world.fleet.slug, "ad\x00a")).encode(),
        json.dumps(spool_line(world.fleet.slug, "\ud800")).encode(),  # a lone surrogate
        b"[" * 10_000 + b"]" * 10_000,
        json.dumps(spool_line(world.fleet.slug, "x" * 5000)).encode(),
    ]) + b"\n" + ndjson(good)
    result = _post(host, world.fleet, mixed).json()
    assert result["accepted"] == [good["id"]]
    assert [r["line"] for r in result["rejected"]] == [1, 2, 3, 4, 5]
    assert all(r["reason"] for r in result["rejected"])
    assert _inbox_agents(world.fleet) == ["ada"]

    too_many = _post(host, world.fleet, ndjson(*[spool_line(world.fleet.slug)] * 1001))
    assert too_many.status_code == 400 and "At most 1000 lines" in str(too_many.json())
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    assert _post(host, world.fleet, b"{}\n" * 1000).status_code == 413
    assert InboxEvent.objects.count() == 1
