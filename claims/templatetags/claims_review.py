"""Template filters for the review pages: `reveal` shows hidden code points as badges."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from fleet.reveal import reveal as _reveal

register = template.Library()


@register.filter
def reveal(value: Any) -> SafeString:
    return _reveal("" if value is None else str(value))


@register.simple_tag(takes_context=True)
def review_queue_waiting(context: dict[str, Any]) -> int | None:
    """How many proposed claims this moderator's fleets have waiting; None for a person
    who is not a moderator (the index then shows no queue entry)."""
    from claims import admin_scope
    from claims.models import Claim

    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not admin_scope.is_moderator(user):
        return None
    return admin_scope.visible_claims(Claim.objects.proposed(), user).count()


@register.filter
def marked(tokens: Any) -> SafeString:
    """A claims.conflicts token list as HTML, the differing tokens in <mark>."""
    from django.utils.html import escape

    parts = []
    for token in tokens:
        text = str(_reveal(token.text))  # reveal escapes and badges hidden code points
        parts.append(f"<mark>{text}</mark>" if token.differs else text)
    return SafeString(" ".join(parts)) if parts else SafeString(escape(""))
