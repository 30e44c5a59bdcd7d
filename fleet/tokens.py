"""API tokens: issue one (the secret is shown once), look one up by its secret, revoke it.

Only a SHA-256 of the secret is stored, plus a short prefix so a person can tell tokens
apart in the admin and in logs. A token is a high-entropy random string, so a plain
(unsalted) hash is enough: there is nothing to brute-force from a dictionary.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import activity
from fleet.models import Agent, ApiToken, Fleet
from mcp_bridge.contract.redact_rules import API_TOKEN_PREFIX

SECRET_PREFIX = API_TOKEN_PREFIX  # the redactor knows the shape (mcp_bridge.contract)
PREFIX_LEN = 12
#: last_used_at is refreshed at most this often: a write per request would cost more than
#: the request itself, and "used in the last minute" is all an operator needs to know.
TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Issued:
    token: ApiToken
    secret: str  # shown once; never stored


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def issue_token(
    fleet: Fleet, *, role: str, name: str, agent: Agent | None = None, by: Any = None
) -> Issued:
    """Create a token for `fleet` and `role`; ValueError for a role/agent that do not fit."""
    if role not in ApiToken.Role.values:
        raise ValueError(f"role must be one of {', '.join(ApiToken.Role.values)}")
    if agent is not None and agent.fleet_id != fleet.pk:
        raise ValueError(f"agent {agent.agent_id} is not in fleet {fleet.slug}")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        fleet=fleet,
        name=name,
        role=role,
        agent=agent,
        prefix=secret[:PREFIX_LEN],
        key_hash=hash_secret(secret),
        created_by=by if getattr(by, "pk", None) else None,
    )
    activity.record(fleet, "token.issued", target=token, user=by, role=role, name=name)
    return Issued(token=token, secret=secret)


def token_for_secret(secret: str) -> ApiToken | None:
    """The live token with this secret, with its fleet and agent loaded; None otherwise."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    return (
        ApiToken.objects.select_related("fleet", "agent")
        .filter(key_hash=hash_secret(secret), revoked_at__isnull=True)
        .first()
    )


def touch(token: ApiToken, *, now: datetime | None = None) -> None:
    """Record use, but write at most once per TOUCH_EVERY per token."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < TOUCH_EVERY:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now


@transaction.atomic
def revoke_token(token: ApiToken, *, by: Any = None, now: datetime | None = None) -> bool:
    """Revoke `token`; False if it already was (the first revocation time is kept)."""
    won = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
    token.refresh_from_db()
    if won:
        activity.record(token.fleet, "token.revoked", target=token, user=by, name=token.name)
    return bool(won)
