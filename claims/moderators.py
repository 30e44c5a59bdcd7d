"""Who may decide a fleet's claims, and the refusal when they may not: shared by every
function that acts as a moderator (moderation, usefulness, contradictions)."""

from __future__ import annotations

from typing import Any

from claims.models import MODERATE_PERMISSION
from fleet import scope
from fleet.models import ApiToken, Fleet


class GateRefused(Exception):
    """The promotion gate said no; the message says which rule."""


def can_moderate(actor: Any, fleet: Fleet) -> bool:
    """May `actor` decide this fleet's claims? The fleet must be theirs (fleet.scope: a
    superuser, a FleetModerator grant, or an unrevoked operator token of the fleet) and a
    person must also hold claims.promote_claim."""
    if not scope.may_act_on_fleet(actor, fleet):
        return False
    if isinstance(actor, ApiToken) or getattr(actor, "is_superuser", False):
        return True
    return bool(actor.has_perm(MODERATE_PERMISSION))
