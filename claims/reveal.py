"""Show a reviewer the characters agents will never see.

The bridge strips invisible and direction-changing code points before a claim reaches an
agent (mcp_bridge.sanitize). A reviewer must see them instead: a claim whose text hides a
tag-character instruction or a bidi override is exactly the claim not to promote. So each
such code point is rendered as a visible badge (`<U+200B>`), and a run of Unicode tag
characters, which spell out hidden ASCII, is shown decoded as one badge.
"""

from __future__ import annotations

import unicodedata

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from mcp_bridge import sanitize

TAG_FIRST, TAG_LAST = 0xE0020, 0xE007E  # the tag block's printable ASCII mirror


def has_hidden(text: str) -> bool:
    """True if the bridge would strip anything from `text` (one C-speed regex pass)."""
    return sanitize.clean_text(text, max_chars=len(text) + 1) != text


def reveal(text: str) -> SafeString:
    """HTML-escaped `text` with every hidden code point shown as a badge."""
    if not has_hidden(text):
        return SafeString(escape(text))
    parts: list[str] = []
    tags: list[str] = []
    for ch in text:
        if TAG_FIRST <= ord(ch) <= TAG_LAST:
            tags.append(ch)
            continue
        if tags:
            parts.append(_tag_badge(tags))
            tags = []
        parts.append(_badge(ch) if sanitize.is_stripped(ord(ch)) else escape(ch))
    if tags:
        parts.append(_tag_badge(tags))
    return mark_safe("".join(parts))  # noqa: S308 - every part is escaped or format_html


def _badge(ch: str) -> str:
    name = unicodedata.name(ch, "unnamed or control character")
    return format_html(
        '<span class="cl-hidden" title="{}">&lt;U+{}&gt;</span>', name, f"{ord(ch):04X}"
    )


def _tag_badge(tags: list[str]) -> str:
    hidden = "".join(chr(ord(t) - 0xE0000) for t in tags)
    first, last = ord(tags[0]), ord(tags[-1])
    return format_html(
        '<span class="cl-hidden" title="{} tag characters U+{}…U+{}">'
        "&lt;hidden tag text: “{}”&gt;</span>",
        len(tags),
        f"{first:04X}",
        f"{last:04X}",
        hidden,
    )
