"""The permission table: every endpoint × every role, plus other fleets (always 404).

A new endpoint adds a row. Columns: method, path (with {h} the handoff id, {promoted} and
{proposed} claim ids), body, and the expected status for agent, integration, operator and
host (a host token relaying for ada: only what an agent host's `sync` does is open to it).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fleet.conftest import ApiAs, World, ndjson, spool_line

ADA = {"agent_id": "ada"}
PROPOSAL = {
    "text": "uv sync is faster than pip install",
    "type": "fact",
    "subject": "tooling",
    "evidence": [{"session_id": "s-9", "message_id": "m-9"}],
}
ROWS: list[tuple[str, str, Any, tuple[int, int, int, int]]] = [
    ("get", "status", None, (200, 200, 200, 403)),
    ("get", "agents", None, (200, 200, 200, 403)),
    ("post", "agents/heartbeat", ADA, (200, 403, 200, 403)),
    ("get", "sessions", None, (200, 200, 200, 403)),
    ("post", "sessions", {**ADA, "session_id": "s-new"}, (201, 201, 201, 403)),
    ("get", "sessions/s-1", None, (200, 200, 200, 403)),
    ("post", "sessions/s-1/end", {"outcome": "success"}, (200, 200, 200, 403)),
    ("get", "leases", None, (200, 200, 200, 403)),
    ("post", "leases/claim", {**ADA, "paths": ["src/**"]}, (200, 403, 200, 403)),
    ("post", "leases/release", ADA, (200, 403, 200, 403)),
    ("get", "handoffs", None, (200, 200, 200, 403)),
    ("post", "handoffs", {**ADA, "summary": "next: docs"}, (201, 403, 201, 403)),
    ("get", "handoffs/{h}", None, (200, 200, 200, 403)),
    ("post", "handoffs/{h}/pickup", {**ADA, "version": 1}, (200, 403, 200, 403)),
    ("post", "handoffs/{h}/clear", {"version": 1}, (200, 403, 200, 403)),
    ("get", "claims", None, (200, 200, 200, 403)),
    ("post", "claims", PROPOSAL, (201, 201, 201, 403)),
    ("get", "claims/search?q=pytest", None, (200, 200, 200, 403)),
    ("get", "claims/{promoted}", None, (200, 200, 200, 403)),
    ("post", "claims/{proposed}/promote", {}, (403, 403, 200, 403)),
    ("post", "claims/{proposed}/reject", {"reason": "dup"}, (403, 403, 200, 403)),
    ("post", "claims/{promoted}/contest", {"note": "flaky"}, (403, 403, 200, 403)),
    ("post", "claims/{promoted}/retract", {"note": "wrong"}, (403, 403, 200, 403)),
    ("get", "timeline?subject=pytest", None, (200, 200, 200, 403)),
    ("get", "incidents", None, (200, 200, 200, 403)),
    ("get", "cache/manifest", None, (200, 200, 200, 200)),
    ("get", "cache/roster.json", None, (200, 200, 200, 200)),
    ("get", "cache/delta?since=x", None, (400, 400, 400, 400)),  # reached, and refused the input
    ("post", "spool", "NDJSON", (200, 403, 200, 200)),
    ("get", "changes", None, (200, 200, 200, 200)),
    ("get", "export", None, (403, 403, 200, 403)),
]
ROLES = ("agent", "integration", "operator", "host")


def _call(client: Any, world: World, method: str, path: str, body: Any) -> Any:
    path = path.format(
        h=world.handoff.pk, promoted=world.promoted.public_id, proposed=world.proposed.public_id
    )
    url = f"/api/v1/fleets/{world.fleet.slug}/{path}"
    if body == "NDJSON":
        data = ndjson(spool_line(world.fleet.slug))
        return client.post(url, data=data, content_type="application/x-ndjson")
    if method == "get":
        return client.get(url)
    return client.post(url, body, format="json")


def _client(api_as: ApiAs, world: World, role: str) -> Any:
    if role == "host":
        return api_as(world.fleet, role, relays=[world.ada])
    return api_as(world.ada) if role == "agent" else api_as(world.fleet, role)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), ROWS)
def test_it_allows_each_role_exactly_its_endpoints(
    api_as: ApiAs,
    world: World,
    role: str,
    method: str,
    path: str,
    body: Any,
    expected: tuple[int, int, int, int],
) -> None:
    response = _call(_client(api_as, world, role), world, method, path, body)
    assert response.status_code == expected[ROLES.index(role)], response.content[:300]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), ROWS)
def test_it_answers_404_to_every_other_fleets_token(
    api_as: ApiAs,
    world: World,
    fleet_b: Any,
    cy: Any,
    role: str,
    method: str,
    path: str,
    body: Any,
    expected: Any,
) -> None:
    client = (api_as(cy) if role == "agent"
              else api_as(fleet_b, role, relays=[cy] if role == "host" else ()))
    assert _call(client, world, method, path, body).status_code == 404


@pytest.mark.parametrize(("method", "path", "body", "expected"), ROWS)
def test_it_answers_401_without_a_token(
    client: Any, world: World, method: str, path: str, body: Any, expected: Any
) -> None:
    from rest_framework.test import APIClient

    response = _call(APIClient(), world, method, path, body)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_fleet_is_404_like_another_fleet(api_as: ApiAs, world: World) -> None:
    client = api_as(world.fleet, "operator")
    assert client.get("/api/v1/fleets/nope/status").status_code == 404


def test_another_fleets_object_under_my_fleet_is_404(api_as: ApiAs, world: World, cy: Any) -> None:
    from fleet import handoffs

    theirs = handoffs.create_handoff(cy, summary="fleet b work")
    client = api_as(world.fleet, "operator")
    base = f"/api/v1/fleets/{world.fleet.slug}"
    assert client.get(f"{base}/handoffs/{theirs.pk}").status_code == 404
    pickup = client.post(
        f"{base}/handoffs/{theirs.pk}/pickup", {**ADA, "version": 1}, format="json"
    )
    assert pickup.status_code == 404
