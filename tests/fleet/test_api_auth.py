"""Tokens at the door: revoked is 401, last use is recorded sparingly, throttles, 413."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from fleet import tokens
from fleet.models import ApiToken
from tests.fleet.conftest import ApiAs, World


def test_a_revoked_token_is_401(api_as: ApiAs, world: World) -> None:
    client = api_as(world.fleet, "operator")
    url = f"/api/v1/fleets/{world.fleet.slug}/status"
    assert client.get(url).status_code == 200
    tokens.revoke_token(client.token)  # type: ignore[attr-defined]
    assert client.get(url).status_code == 401


def test_a_made_up_token_is_401(world: World) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer ctx_not-a-real-token")
    assert client.get(f"/api/v1/fleets/{world.fleet.slug}/status").status_code == 401


def test_only_a_hash_and_a_prefix_are_stored(world: World) -> None:
    issued = tokens.issue_token(world.fleet, role="agent", name="ci")
    row = ApiToken.objects.get(pk=issued.token.pk)
    assert issued.secret.startswith(row.prefix)
    assert row.key_hash == tokens.hash_secret(issued.secret)
    assert issued.secret not in repr(list(ApiToken.objects.values()))


def test_last_used_is_written_at_most_once_a_minute(
    api_as: ApiAs, world: World, django_assert_max_num_queries: Any
) -> None:
    client = api_as(world.fleet, "integration")
    token: ApiToken = client.token  # type: ignore[attr-defined]
    url = f"/api/v1/fleets/{world.fleet.slug}/agents"
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        client.get(url)
        first = ApiToken.objects.get(pk=token.pk).last_used_at
        client.get(url)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == first == start
    with time_machine.travel(start + timedelta(seconds=61), tick=False):
        client.get(url)
    assert ApiToken.objects.get(pk=token.pk).last_used_at == start + timedelta(seconds=61)


def test_throttling_is_per_token_with_retry_after(
    api_as: ApiAs, world: World, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": "3/min"},
    }
    url = f"/api/v1/fleets/{world.fleet.slug}/status"
    noisy, quiet = api_as(world.fleet, "operator"), api_as(world.fleet, "operator")
    assert [noisy.get(url).status_code for _ in range(3)] == [200, 200, 200]
    throttled = noisy.get(url)
    assert throttled.status_code == 429
    assert int(throttled.headers["Retry-After"]) > 0
    assert quiet.get(url).status_code == 200


def test_requests_refused_for_another_fleets_url_count_toward_the_limit(
    api_as: ApiAs, world: World, fleet_b: Any, settings: Any
) -> None:
    """A 404 costs as much as a 200: probing other fleets' URLs runs into 429 like any
    other burst, and the refusals also use up the token's own fleet's allowance."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": "4/min"},
    }
    prober = api_as(world.fleet, "operator")
    other = [f"/api/v1/fleets/{fleet_b.slug}/status", "/api/v1/fleets/no-such-fleet/claims",
             f"/api/v1/fleets/{fleet_b.slug}/handoffs", f"/api/v1/fleets/{fleet_b.slug}/agents"]
    assert [prober.get(url).status_code for url in other] == [404] * 4
    beyond = prober.get(f"/api/v1/fleets/{fleet_b.slug}/status")
    assert beyond.status_code == 429 and int(beyond.headers["Retry-After"]) > 0
    assert prober.get(f"/api/v1/fleets/{world.fleet.slug}/status").status_code == 429


def test_a_role_refused_with_403_counts_and_an_allowed_request_counts_once(
    api_as: ApiAs, world: World, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": "3/min"},
    }
    reader = api_as(world.fleet, "integration")
    base = f"/api/v1/fleets/{world.fleet.slug}"
    assert reader.post(f"{base}/leases/claim", {"paths": ["a"]}, format="json").status_code == 403
    assert [reader.get(f"{base}/agents").status_code for _ in range(2)] == [200, 200]
    assert reader.get(f"{base}/agents").status_code == 429  # 3 counted, not 5


def test_a_body_over_the_limit_is_413(api_as: ApiAs, world: World, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    client = api_as(world.ada)
    big = {"summary": "x" * 4000}
    response = client.post(f"/api/v1/fleets/{world.fleet.slug}/handoffs", big, format="json")
    assert response.status_code == 413
    spool = client.post(
        f"/api/v1/fleets/{world.fleet.slug}/spool",
        data=b"{}\n" * 1000,
        content_type="application/x-ndjson",
    )
    assert spool.status_code == 413


def test_lists_are_cursor_paginated_with_a_clamped_page_size(api_as: ApiAs, world: World) -> None:
    from fleet.models import Agent

    Agent.objects.bulk_create(
        [Agent(fleet=world.fleet, agent_id=f"bot-{i:03d}") for i in range(230)]
    )
    client = api_as(world.fleet, "integration")
    page = client.get(f"/api/v1/fleets/{world.fleet.slug}/agents?limit=1000").json()
    assert len(page["results"]) == 200
    rest = client.get(page["next"]).json()
    assert len(rest["results"]) == 231 - 200  # 230 bots + ada
    assert rest["next"] is None


def test_staff_session_auth_works_for_the_browsable_api(world: World, mod: Any) -> None:
    client = APIClient()
    client.force_login(mod)
    url = f"/api/v1/fleets/{world.fleet.slug}/claims"
    assert client.get(url).status_code == 200  # mod moderates fleet_a (world fixture)
    assert client.get("/api/v1/fleets/elsewhere/claims").status_code == 404
