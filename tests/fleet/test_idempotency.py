"""REST writes with an Idempotency-Key: a retry is answered, never applied twice."""

from __future__ import annotations

import uuid

from fleet.models import Agent, AppliedEvent, Fleet, Handoff, Lease
from tests.fleet.conftest import ApiAs


def test_a_retried_handoff_is_created_once_and_answered_the_same(
    fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    client, key = api_as(ada), str(uuid.uuid4())
    url = f"/api/v1/fleets/{fleet_a.slug}/handoffs"
    body = {"summary": "half done", "status": "blocked"}
    first = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    again = client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Handoff.objects.filter(fleet=fleet_a).count() == 1
    assert AppliedEvent.objects.get(event_id=key).source == "api"


def test_a_key_is_bound_to_its_kind_and_must_be_a_uuid(
    fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    client, key = api_as(ada), str(uuid.uuid4())
    base = f"/api/v1/fleets/{fleet_a.slug}"
    claim = {"paths": ["src/a.py"], "reason": "r"}
    assert client.post(f"{base}/leases/claim", claim, format="json",
                       HTTP_IDEMPOTENCY_KEY=key).status_code == 200
    other = client.post(f"{base}/leases/release", {}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert other.status_code == 409
    assert Lease.objects.active().filter(fleet=fleet_a).count() == 1  # not released
    bad = client.post(f"{base}/leases/claim", claim, format="json", HTTP_IDEMPOTENCY_KEY="x")
    assert bad.status_code == 400 and "UUID" in bad.json()["detail"]


def test_a_refused_write_records_nothing(fleet_a: Fleet, ada: Agent, api_as: ApiAs) -> None:
    client, key = api_as(ada), str(uuid.uuid4())
    url = f"/api/v1/fleets/{fleet_a.slug}/handoffs"
    assert client.post(url, {"summary": ""}, format="json",
                       HTTP_IDEMPOTENCY_KEY=key).status_code == 400
    assert not AppliedEvent.objects.filter(event_id=key).exists()
    ok = client.post(url, {"summary": "now right", "status": "done"}, format="json",
                     HTTP_IDEMPOTENCY_KEY=key)
    assert ok.status_code == 201
