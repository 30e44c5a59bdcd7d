"""REST authentication by fleet-scoped API token (`Authorization: Bearer ctx_…`).

A token is not a person, so request.user is a small TokenUser stand-in: authenticated,
never staff, and carrying the token for throttling and logging. request.auth is the
ApiToken itself; the permission class (fleet/permissions.py) reads it.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from fleet import tokens
from fleet.models import ApiToken

KEYWORDS = (b"bearer", b"token")


class TokenUser:
    """What request.user is for a token request: authenticated, with no Django permissions."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, token: ApiToken) -> None:
        self.token = token
        self.pk = f"token:{token.pk}"  # throttles key on this; never a real user id
        self.username = f"token:{token.prefix}"

    def __str__(self) -> str:
        return self.username

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False


class ApiTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[TokenUser, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None  # not ours: let session auth (browsable API) try
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Authorization: Bearer <token>, one token.")
        try:
            secret = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        token = tokens.token_for_secret(secret)
        if token is None:
            # Unknown and revoked tokens look the same: a caller learns nothing either way.
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        tokens.touch(token)
        return TokenUser(token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="ctxlake"'  # makes DRF answer 401, not 403, without credentials
