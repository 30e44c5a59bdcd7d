"""Leases offered with a handoff move to whoever picks it up, atomically, with events."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from fleet import cache_render, leases, spool_apply
from fleet.models import Activity, Agent, Handoff, Lease
from tests.fleet.conftest import ApiAs


def _handoff(agent: Agent, *, transfer: bool) -> Handoff:
    event = spool_apply.Envelope(
        event_id=str(uuid.uuid4()), kind="handoff.create", fleet=agent.fleet, agent=agent,
        session=None, at=timezone.now(),
        payload={"summary": "refunds half done", "status": "in_progress", "next": None,
                 "transfer_leases": transfer})
    applied = spool_apply.one(spool_apply.apply_handoff_creates, event)
    return Handoff.objects.get(pk=applied["handoff"])


def _pickup(api_as: ApiAs, agent: Agent, handoff: Handoff, **body: object) -> dict:
    url = f"/api/v1/fleets/{agent.fleet.slug}/handoffs/{handoff.pk}/pickup"
    response = api_as(agent).post(url, {"version": handoff.version, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_pickup_moves_the_offered_leases_with_their_remaining_ttl(
    api_as: ApiAs, ada: Agent, bo: Agent
) -> None:
    held = leases.claim_paths(ada, ["src/payments/**", "docs"], ttl=timedelta(minutes=30),
                              reason="refunds").held
    original = {lease.path: lease.expires_at for lease in held}
    handoff = _handoff(ada, transfer=True)
    assert set(Lease.objects.filter(offered_with=handoff).values_list("path", flat=True)) == {
        "src/payments/**", "docs"}
    answer = _pickup(api_as, bo, handoff, confirm=True)
    assert answer["picked_up"] is True
    assert answer["transferred_leases"] == ["docs", "src/payments/**"]
    assert not Lease.objects.active().filter(agent=ada).exists()
    mine = {lease.path: lease.expires_at for lease in Lease.objects.active().filter(agent=bo)}
    assert mine == original
    moved = Activity.objects.get(verb="lease.transferred")
    assert moved.agent == bo and moved.data["from_agent"] == "ada"
    assert Activity.objects.filter(verb="lease.offered", agent=ada).count() == 1


def test_nothing_moves_without_transfer_or_through_the_pickup_gate(
    api_as: ApiAs, ada: Agent, bo: Agent
) -> None:
    leases.claim_paths(ada, ["src/**"], ttl=timedelta(minutes=30))
    plain = _handoff(ada, transfer=False)
    assert _pickup(api_as, bo, plain, confirm=True)["transferred_leases"] == []
    assert Lease.objects.active().get().agent == ada
    offered = _handoff(ada, transfer=True)
    gated = _pickup(api_as, bo, offered)
    assert gated["needs_confirmation"] is True and gated["transferred_leases"] == []
    assert Lease.objects.active().get().agent == ada  # gated: nothing changes


def test_a_picker_who_already_holds_the_path_keeps_one_lease_with_the_later_expiry(
    api_as: ApiAs, ada: Agent, bo: Agent
) -> None:
    leases.claim_paths(ada, ["src/**"], ttl=timedelta(hours=2))
    leases.claim_paths(bo, ["src/**"], ttl=timedelta(minutes=10))
    handoff = _handoff(ada, transfer=True)
    ada_expiry = Lease.objects.active().get(agent=ada).expires_at
    _pickup(api_as, bo, handoff, confirm=True)
    (lease,) = Lease.objects.active()
    assert lease.agent == bo and lease.expires_at == ada_expiry


def test_an_unclaimed_offer_expires_with_the_original_ttl(ada: Agent) -> None:
    (lease,) = leases.claim_paths(ada, ["src/**"], ttl=timedelta(minutes=5)).held
    _handoff(ada, transfer=True)
    assert leases.expire_leases(now=timezone.now() + timedelta(minutes=6)) == 1
    lease.refresh_from_db()
    assert lease.released_at == lease.expires_at and lease.offered_with is not None


def test_the_render_shows_the_offer_on_the_lease_and_the_handoff(ada: Agent) -> None:
    leases.claim_paths(ada, ["src/**"], ttl=timedelta(minutes=5))
    handoff = _handoff(ada, transfer=True)
    (rendered,) = cache_render.render_handoffs(ada.fleet)["handoffs"]
    assert rendered["offered_leases"] == ["src/**"]
    roster = cache_render.render_roster(ada.fleet, now=timezone.now())
    assert roster["agents"][0]["leases"][0]["offered_with"] == f"h-{handoff.pk}"
