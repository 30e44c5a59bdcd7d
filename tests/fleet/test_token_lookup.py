"""token_for_secret's precompiled statement answers exactly what the ORM's query answers.

It exists for speed (fleet/tokens.py says how much); these tests hold it to the ORM's own
`select_related("fleet", "agent").filter(…).first()`, field by field, for each kind of
token, so a field added to any of the three models cannot be silently dropped or shifted.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Model
from rest_framework.test import APIClient

from fleet import tokens
from fleet.models import Agent, ApiToken, Fleet


def _orm(secret: str) -> ApiToken | None:
    return (
        ApiToken.objects.select_related("fleet", "agent")
        .filter(key_hash=tokens.hash_secret(secret), revoked_at__isnull=True)
        .first()
    )


def _fields(obj: Model) -> dict[str, Any]:
    assert obj.get_deferred_fields() == set()  # loaded whole: no read goes back to the db
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def _same(found: ApiToken | None, want: ApiToken | None) -> None:
    assert (found is None) == (want is None)
    if found is None or want is None:
        return
    assert _fields(found) == _fields(want)
    assert _fields(found.fleet) == _fields(want.fleet)
    assert (found.agent is None) == (want.agent is None)
    if found.agent is not None and want.agent is not None:
        assert _fields(found.agent) == _fields(want.agent)
    assert not found._state.adding and found._state.db == want._state.db


def test_an_agent_token_is_loaded_as_the_orm_loads_it(fleet_a: Fleet, ada: Agent) -> None:
    fleet_a.repo_url_template = "https://git.example/{repo}/blob/{commit}/{path}"
    fleet_a.claim_seq = 41
    fleet_a.save()
    secret = tokens.issue_token(fleet_a, role="agent", name="ada-1", agent=ada).secret
    found = tokens.token_for_secret(secret)
    _same(found, _orm(secret))
    assert found is not None and found.agent is not None
    assert (found.agent.agent_id, found.fleet.slug, found.fleet.claim_seq) == ("ada", "fleet-a", 41)


@pytest.mark.parametrize("role", ["operator", "host"])
def test_a_token_without_an_agent_has_none(fleet_a: Fleet, role: str) -> None:
    secret = tokens.issue_token(fleet_a, role=role, name=f"{role}-1").secret
    found = tokens.token_for_secret(secret)
    _same(found, _orm(secret))
    assert found is not None and found.agent is None and found.agent_id is None


def test_a_loaded_token_saves_and_reads_relations_as_usual(fleet_a: Fleet, ada: Agent) -> None:
    secret = tokens.issue_token(fleet_a, role="agent", name="ada-2", agent=ada).secret
    found = tokens.token_for_secret(secret)
    assert found is not None
    tokens.touch(found)  # an UPDATE through the ORM on the loaded instance
    found.refresh_from_db()
    assert found.last_used_at is not None
    assert list(found.relays_for.all()) == []


def test_revoked_unknown_and_foreign_secrets_find_nothing(fleet_a: Fleet, ada: Agent) -> None:
    issued = tokens.issue_token(fleet_a, role="agent", name="ada-3", agent=ada)
    tokens.revoke_token(issued.token)
    for secret in (issued.secret, tokens.SECRET_PREFIX + "x" * 43, "not-ours",
                   tokens.SECRET_PREFIX + "\x00", tokens.SECRET_PREFIX + "é" * 5000):
        assert tokens.token_for_secret(secret) is None
        assert _orm(secret) is None


def test_the_api_answers_401_once_a_token_is_revoked(fleet_a: Fleet, ada: Agent) -> None:
    issued = tokens.issue_token(fleet_a, role="agent", name="ada-4", agent=ada)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    assert client.get("/api/v1/fleets/fleet-a/leases").status_code == 200
    tokens.revoke_token(issued.token)
    assert client.get("/api/v1/fleets/fleet-a/leases").status_code == 401
