"""Template tags for screened text: the same markup as the admin's Python (fleet.screen_view)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from fleet import screen_view
from mcp_bridge.contract import screen

register = template.Library()


@register.simple_tag
def screen_marked(text: Any, spans: Any) -> SafeString:
    """`text` with the screen's `spans` marked: {% screen_marked claim.text spans %}."""
    return screen_view.marked("" if text is None else str(text), spans or [])


@register.simple_tag
def screen_status(row: Any) -> SafeString:
    """Withheld, or released by whom and when."""
    return screen_view.status(row)


@register.filter
def screen_reasons(flags: Any) -> str:
    """The distinct reasons of a row's stored flags, one line."""
    return screen.reasons(flags) if isinstance(flags, dict) else ""
