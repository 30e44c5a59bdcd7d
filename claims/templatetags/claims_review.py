"""Template filters for the review pages: `reveal` shows hidden code points as badges."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from claims.reveal import reveal as _reveal

register = template.Library()


@register.filter
def reveal(value: Any) -> SafeString:
    return _reveal("" if value is None else str(value))
