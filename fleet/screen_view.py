"""How a person reads the instruction screen's verdict: states, marked spans, badges.

The screen (mcp_bridge.contract.screen) stores spans per field on each Screened row, and
agents get the withheld marker instead of the text. A moderator must decide on the words
themselves, so the admin shows the text with each span marked and its reason on hover.
Every admin page that shows screened text (the claims queue and review page, fleet's
session, lease and handoff pages) goes through `marked` here: the one place that turns
hostile text plus stored offsets into HTML. It lives in fleet because fleet's admin may
not import claims, and claims may import fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from fleet.reveal import reveal
from mcp_bridge.contract import screen

FLAGGED, RELEASED, CLEAN = "flagged", "released", "clean"
#: Each state as a filter on one Screened table; every row is in exactly one of them.
STATE_Q: dict[str, Q] = {
    FLAGGED: ~Q(screen_flags={}) & Q(screen_released_at__isnull=True),
    RELEASED: ~Q(screen_flags={}) & Q(screen_released_at__isnull=False),
    CLEAN: Q(screen_flags={}),
}
STATE_LABELS = (
    (FLAGGED, "flagged, withheld from agents"),
    (RELEASED, "released by a person"),
    (CLEAN, "clean"),
)
BADGE = "instruction-like text"


def marked(text: str, spans: Iterable[Any]) -> SafeString:
    """`text` as HTML with each span in <mark class="screen-flag" title="reason">; every
    piece is escaped and its hidden code points shown (fleet.reveal), never trusted."""
    parts, at = [], 0
    for start, end, reason in _spans(spans, len(text)):
        if start < at:
            continue  # stored spans are merged; an overlapping one is shown by the first
        parts.append(reveal(text[at:start]))
        parts.append(format_html('<mark class="screen-flag" title="{}">{}</mark>', reason,
                                 reveal(text[start:end])))
        at = end
    parts.append(reveal(text[at:]))
    return mark_safe("".join(parts))  # every part above is reveal() or format_html


def _spans(spans: Iterable[Any], n: int) -> Iterator[tuple[int, int, str]]:
    """(start, end, reason) in order, clipped to the text; malformed entries skipped (the
    JSON is the server's own, but a page must not fail on one odd row)."""
    found = []
    for span in spans if isinstance(spans, list | tuple) else ():
        try:
            start, end = max(0, int(span["start"])), min(n, int(span["end"]))
        except (TypeError, KeyError, ValueError):
            continue
        if start < end:
            found.append((start, end, str(span.get("reason") or span.get("rule") or "")))
    yield from sorted(found)


def badge(flags: Mapping[str, Any], *, pending: bool) -> SafeString:
    """The list column: a warning while withheld, a quiet "released" after, nothing if
    the screen found nothing. The reasons are its title."""
    if not flags:
        return SafeString("")
    why = screen.reasons(flags)
    if pending:
        return format_html('<span class="screen-badge" title="{}">⚠ {}</span>', why, BADGE)
    return format_html('<span class="screen-badge released" title="{}">released</span>',
                       f"released by a person; the screen said: {why}")


def status(row: Any) -> SafeString:
    """Who released the row's text and when, or that agents see the withheld marker."""
    if not row.screen_flags:
        return format_html('<span class="help">{}</span>', "The screen found nothing.")
    if row.screen_released_at is None:
        return format_html(
            '<span class="screen-badge">⚠ {}</span> {}: {}', BADGE,
            "withheld from other agents until a moderator releases it", screen.reasons(
                row.screen_flags))
    who = row.screen_released_by.get_username() if row.screen_released_by else "an operator"
    when = timezone.localtime(row.screen_released_at)
    return format_html('<span class="screen-released">Released by {} at {}</span>: {}', who,
                       f"{when:%Y-%m-%d %H:%M %Z}", "agents see it as written")


def field(row: Any, name: str) -> SafeString:
    """One text field of a Screened row for a person: marked if flagged, else revealed."""
    text = getattr(row, name) or ""
    spans = row.screen_flags.get(name)
    if not spans:
        return format_html('<div class="screen-text">{}</div>', reveal(text))
    return format_html('<div class="screen-text">{}</div><p class="screen-reasons">{}: {}</p>',
                       marked(text, spans), "Flagged", screen.reasons({name: spans}))


def withheld_candidates(items: Any) -> SafeString:
    """A session's capture candidates the screen held back ("1 candidate withheld: …"),
    each with its text marked; shown to moderators only, never proposed."""
    rows = [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []
    if not rows:
        return format_html('<span class="help">{}</span>', "none")
    head = f"{len(rows)} candidate{'s' if len(rows) != 1 else ''} withheld: {BADGE}"
    body = format_html_join("", '<li class="screen-candidate"><span class="help">{} · {}</span>'
                            '<div class="screen-text">{}</div></li>',
                            ((c.get("extractor") or "capture",
                              screen.reasons({"text": _list(c.get("spans"))}),
                              marked(str(c.get("text") or ""), _list(c.get("spans"))))
                             for c in rows))
    return format_html('<p class="screen-reasons">{}</p><ol class="screen-candidates">{}</ol>',
                       head, body)


def _list(value: Any) -> list[Any]:
    return [s for s in value if isinstance(s, dict)] if isinstance(value, list) else []
