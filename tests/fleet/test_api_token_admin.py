"""The token admin: issue shows the secret once; revoke is an action; no edits, no deletes."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.test import Client

from fleet import tokens
from fleet.models import Activity, Agent, ApiToken, Fleet


def test_it_issues_a_token_and_shows_the_secret_once(
    fleet_a: Fleet, root_client: Client
) -> None:
    client = root_client
    admin = User.objects.get(username="root")
    response = client.post(
        "/admin/fleet/apitoken/add/",
        {"fleet": fleet_a.pk, "name": "dash", "role": "integration", "agent": ""},
        follow=True,
    )
    secret = re.search(r"(ctx_[A-Za-z0-9_-]{20,})", response.content.decode())[1]
    token = tokens.token_for_secret(secret)
    assert token is not None and token.created_by == admin
    page = client.get(f"/admin/fleet/apitoken/{token.pk}/change/").content.decode()
    assert secret not in page
    client.post(
        "/admin/fleet/apitoken/",
        {"action": "revoke_selected", "_selected_action": [token.pk]},
    )
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


def test_it_issues_a_host_token_with_its_agents_and_edits_only_that_list(
    fleet_a: Fleet, ada: Agent, bo: Agent, root_client: Client
) -> None:
    client = root_client
    response = client.post(
        "/admin/fleet/apitoken/add/",
        {"fleet": fleet_a.pk, "name": "build-1", "role": "host", "agent": "",
         "relays_for": [ada.pk]},
        follow=True,
    )
    secret = re.search(r"(ctx_[A-Za-z0-9_-]{20,})", response.content.decode())[1]
    token = tokens.token_for_secret(secret)
    assert token is not None and list(token.relays_for.all()) == [ada]

    page = client.get(f"/admin/fleet/apitoken/{token.pk}/change/")
    assert list(page.context["adminform"].form.fields) == ["relays_for"]
    client.post(f"/admin/fleet/apitoken/{token.pk}/change/",
                {"relays_for": [ada.pk, bo.pk], "role": "operator", "name": "renamed"})
    token.refresh_from_db()
    assert (token.role, token.name) == ("host", "build-1")  # the rest stays as issued
    assert set(token.relays_for.all()) == {ada, bo}
    change = Activity.objects.get(verb="token.relays_changed")
    assert (change.data["added"], change.data["removed"]) == (["bo"], [])


def test_it_refuses_agents_that_do_not_fit_the_token(
    fleet_a: Fleet, ada: Agent, cy: Agent, root_client: Client
) -> None:
    client = root_client
    for role, relays, agent in (("host", [cy.pk], ""), ("integration", [ada.pk], ""),
                                ("host", [ada.pk], ada.pk)):
        response = client.post(
            "/admin/fleet/apitoken/add/",
            {"fleet": fleet_a.pk, "name": "x", "role": role, "agent": agent,
             "relays_for": relays},
        )
        assert response.status_code == 200  # the form again, with its error
        assert response.context["adminform"].form.errors, (role, relays)
    assert not ApiToken.objects.exists()


def test_a_non_host_token_has_no_list_to_edit(
    fleet_a: Fleet, ada: Agent, root_client: Client
) -> None:
    client = root_client
    token = tokens.issue_token(fleet_a, role="operator", name="ops").token
    page = client.get(f"/admin/fleet/apitoken/{token.pk}/change/")
    assert list(page.context["adminform"].form.fields) == []
    client.post(f"/admin/fleet/apitoken/{token.pk}/change/", {"relays_for": [ada.pk]})
    assert not token.relays_for.exists()
