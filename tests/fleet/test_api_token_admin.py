"""The token admin: issue shows the secret once; revoke is an action; no edits, no deletes."""

from __future__ import annotations

import re
from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from fleet import tokens
from fleet.models import ApiToken, Fleet


def test_it_issues_a_token_and_shows_the_secret_once(fleet_a: Fleet, settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    admin = User.objects.create_superuser("root", password="pw-1234-root")
    client = Client()
    client.force_login(admin)
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
