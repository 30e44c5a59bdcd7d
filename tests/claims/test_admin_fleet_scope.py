"""The per-fleet admin permission table: every admin model × every door × two fleets.

Alice moderates fleet A only, and holds every stock permission of the fleet and claims
apps (view/add/change/delete of each model, plus promote_claim) — the worst case: the
permissions alone would open everything, so only fleet.scope keeps fleet B away. For each
admin model registered by those apps, fleet A's row is reachable and fleet B's is not:
list, change (GET and a forged POST), delete (GET and a forged POST), history, add with a
forged fleet, raw-id popups and autocomplete.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from claims import moderation
from claims.models import Claim, ClaimEvent
from fleet import handoffs, tokens
from fleet.models import (
    Activity,
    Agent,
    ApiToken,
    Fleet,
    FleetModerator,
    Handoff,
    Incident,
    Lease,
    Session,
)
from tests.claims.witness import seen

OK, GONE = "ok", "gone"  # reachable / looks absent (redirect, 403 or 404)


@dataclass
class Row:
    model: type[Model]
    change: str  # what GET change gives for fleet A's row: OK, or GONE (superuser-only)
    delete: str  # what GET delete gives for fleet A's row


TABLE = [
    Row(Fleet, OK, OK),
    Row(FleetModerator, GONE, GONE),  # grants are a superuser's business only
    Row(Agent, OK, OK),
    Row(Session, OK, OK),
    Row(Lease, OK, OK),
    Row(Handoff, OK, OK),
    Row(Activity, OK, OK),
    Row(ApiToken, OK, GONE),  # revoked, never deleted
    Row(Claim, OK, GONE),  # decided through moderation, never deleted
    Row(ClaimEvent, OK, GONE),  # append-only
    Row(Incident, OK, GONE),  # a record: viewed, never edited or deleted through a form
]


def _objects(fleet: Fleet, tag: str) -> dict[type[Model], Model]:
    agent = Agent.objects.create(fleet=fleet, agent_id=f"agent-{tag}")
    seen(fleet, f"sess-{tag}", agent=agent)
    session = Session.objects.get(fleet=fleet, session_id=f"sess-{tag}")
    claim = moderation.propose_claim(
        fleet,
        text=f"claim of {tag}",
        type="fact",
        subject="s",
        evidence=[{"session_id": f"sess-{tag}", "message_id": "m"}],
    ).claim
    other = User.objects.create_user(f"grantee-{tag}", is_staff=True)
    return {
        Fleet: fleet,
        FleetModerator: FleetModerator.objects.create(fleet=fleet, user=other),
        Agent: agent,
        Session: session,
        Lease: Lease.objects.create(
            fleet=fleet,
            agent=agent,
            session=session,
            path=f"src/{tag}/**",
            expires_at=timezone.now() + timedelta(hours=1),
        ),
        Handoff: handoffs.create_handoff(agent, summary=f"handoff of {tag}", session=session),
        Activity: Activity.objects.create(fleet=fleet, verb="test.made", target_id=tag),
        ApiToken: tokens.issue_token(fleet, role="operator", name=f"token-{tag}").token,
        Claim: claim,
        ClaimEvent: claim.events.get(),
        Incident: Incident.objects.create(fleet=fleet, kind=Incident.Kind.values[0],
                                          actor=agent, paths=[f"src/{tag}.py"]),
    }


@pytest.fixture
def world(fleet_a: Fleet, fleet_b: Fleet) -> dict[str, Any]:
    alice = User.objects.create_user("alice", password="pw-pw-pw-1234", is_staff=True)
    types = ContentType.objects.filter(app_label__in=["fleet", "claims"])
    alice.user_permissions.add(*Permission.objects.filter(content_type__in=types))
    FleetModerator.objects.create(fleet=fleet_a, user=alice)
    client = Client()
    client.force_login(alice)
    return {"client": client, "a": _objects(fleet_a, "a"), "b": _objects(fleet_b, "b")}


def _url(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def _outcome(response: Any) -> str:
    return OK if response.status_code == 200 else GONE


def test_the_table_covers_every_admin_model_of_both_apps() -> None:
    registered = {m for m in admin.site._registry if m._meta.app_label in ("fleet", "claims")}
    assert registered == {row.model for row in TABLE}


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.model.__name__)
def test_lists_show_fleet_a_only(world: dict[str, Any], row: Row) -> None:
    response = world["client"].get(_url(row.model, "changelist"))
    if row.change == GONE:
        assert response.status_code == 403
        return
    shown = {obj.pk for obj in response.context["cl"].result_list}
    assert world["a"][row.model].pk in shown
    assert world["b"][row.model].pk not in shown
    popup = world["client"].get(_url(row.model, "changelist"), {"_popup": "1", "_to_field": "id"})
    assert world["b"][row.model].pk not in {o.pk for o in popup.context["cl"].result_list}


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.model.__name__)
def test_change_history_and_delete_pages_reach_fleet_a_only(
    world: dict[str, Any], row: Row
) -> None:
    client = world["client"]
    a, b = world["a"][row.model], world["b"][row.model]
    assert _outcome(client.get(_url(row.model, "change", a.pk))) == row.change
    assert _outcome(client.get(_url(row.model, "delete", a.pk))) == row.delete
    for view in ("change", "delete", "history"):
        assert _outcome(client.get(_url(row.model, view, b.pk))) == GONE, view


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.model.__name__)
def test_forged_posts_on_fleet_bs_rows_change_and_delete_nothing(
    world: dict[str, Any], row: Row
) -> None:
    client = world["client"]
    b = world["b"][row.model]
    names = [f.attname for f in row.model._meta.concrete_fields]
    before = row.model._default_manager.filter(pk=b.pk).values(*names).first()
    client.post(_url(row.model, "delete", b.pk), {"post": "yes"})
    forged = {
        f.name: "forged"
        for f in row.model._meta.concrete_fields
        if f.get_internal_type() in ("CharField", "TextField", "SlugField")
    }
    client.post(_url(row.model, "change", b.pk), forged)
    after = row.model._default_manager.filter(pk=b.pk).values(*names).first()
    assert after == before


def test_bulk_actions_with_forged_ids_touch_nothing(world: dict[str, Any]) -> None:
    b_token = world["b"][ApiToken]
    world["client"].post(
        _url(ApiToken, "changelist"),
        {"action": "revoke_selected", "_selected_action": [b_token.pk]},
    )
    b_token.refresh_from_db()
    assert b_token.revoked_at is None
    b_activity = world["b"][Activity]
    world["client"].post(
        _url(Activity, "changelist"),
        {"action": "delete_selected", "_selected_action": [b_activity.pk], "post": "yes"},
    )
    assert Activity.objects.filter(pk=b_activity.pk).exists()


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (
            Lease,
            lambda w: {
                "fleet": w["b"][Fleet].pk,
                "agent": w["b"][Agent].pk,
                "path": "x/**",
                "acquired_at_0": "2026-01-01",
                "acquired_at_1": "00:00:00",
                "expires_at_0": "2030-01-01",
                "expires_at_1": "00:00:00",
            },
        ),
        (ApiToken, lambda w: {"fleet": w["b"][Fleet].pk, "name": "forged", "role": "operator"}),
        (Agent, lambda w: {"fleet": w["b"][Fleet].pk, "agent_id": "forged"}),
        (
            Activity,
            lambda w: {
                "fleet": w["b"][Fleet].pk,
                "verb": "forged.verb",
                "at_0": "2026-01-01",
                "at_1": "00:00:00",
            },
        ),
    ],
    ids=["lease", "token", "agent", "activity"],
)
def test_add_with_a_forged_fleet_creates_nothing(
    world: dict[str, Any], model: type[Model], data: Any
) -> None:
    count = model._default_manager.count()
    page = world["client"].get(_url(model, "add"))
    if page.status_code == 200:
        choices = page.context["adminform"].form.fields["fleet"].queryset
        assert list(choices) == [world["a"][Fleet]]
    world["client"].post(_url(model, "add"), data(world))
    assert model._default_manager.count() == count


def test_a_fleet_is_added_by_a_superuser_only(world: dict[str, Any]) -> None:
    assert world["client"].get(_url(Fleet, "add")).status_code == 403


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (Lease, "agent"),
        (Lease, "session"),
        (Session, "agent"),
        (Handoff, "from_agent"),
        (Handoff, "picked_up_session"),
        (ApiToken, "agent"),
    ],
)
def test_autocomplete_offers_fleet_a_only(
    world: dict[str, Any], model: type[Model], field: str
) -> None:
    response = world["client"].get(
        reverse("admin:autocomplete"),
        {
            "app_label": model._meta.app_label,
            "model_name": model._meta.model_name,
            "field_name": field,
            "term": "",
        },
    )
    assert response.status_code == 200
    ids = {int(r["id"]) for r in response.json()["results"]}
    remote = model._meta.get_field(field).related_model
    assert world["a"][remote].pk in ids and world["b"][remote].pk not in ids


def test_filters_list_only_fleet_a(world: dict[str, Any]) -> None:
    page = world["client"].get(_url(Lease, "changelist")).content.decode()
    assert "fleet-a" in page and "fleet-b" not in page


def test_a_superuser_sees_both_fleets(world: dict[str, Any]) -> None:
    root = User.objects.create_superuser("root", password="pw-pw-pw-1234")
    client = Client()
    client.force_login(root)
    for row in TABLE:
        shown = {o.pk for o in client.get(_url(row.model, "changelist")).context["cl"].result_list}
        assert {world["a"][row.model].pk, world["b"][row.model].pk} <= shown, row.model
