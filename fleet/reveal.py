"""Show a reviewer the characters agents will never see.

The bridge strips invisible and direction-changing code points before a claim reaches an
agent (mcp_bridge.contract.sanitize). A reviewer must see them instead: a claim whose text hides a
tag-character instruction or a bidi override is exactly the claim not to promote. So each
such code point is shown as a visible badge (`<U+200B>`), and a run of Unicode tag
characters, which spell out hidden ASCII, is shown decoded as one badge. `reveal` is for
HTML (the admin), `reveal_plain` for a terminal (the `claims` command).

It lives in fleet, the lower layer, because every agent-written text needs it: a session
summary or a handoff note hides characters as well as a claim does, and fleet's admin
may not import claims.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from mcp_bridge.contract import sanitize

TAG_FIRST, TAG_LAST = 0xE0020, 0xE007E  # the tag block's printable ASCII mirror


def has_hidden(text: str) -> bool:
    """True if the bridge would strip anything from `text` (one C-speed regex pass)."""
    return sanitize.clean_text(text, max_chars=len(text) + 1) != text


def _segments(text: str) -> Iterator[tuple[str, str]]:
    """("text", chunk) | ("hidden", one char) | ("tags", a run of tag chars), in order."""
    plain: list[str] = []
    tags: list[str] = []
    for ch in text:
        if TAG_FIRST <= ord(ch) <= TAG_LAST:
            if plain:
                yield "text", "".join(plain)
                plain = []
            tags.append(ch)
            continue
        if tags:
            yield "tags", "".join(tags)
            tags = []
        if sanitize.is_stripped(ord(ch)):
            if plain:
                yield "text", "".join(plain)
                plain = []
            yield "hidden", ch
        else:
            plain.append(ch)
    if tags:
        yield "tags", "".join(tags)
    if plain:
        yield "text", "".join(plain)


def _decoded(tags: str) -> str:
    return "".join(chr(ord(t) - 0xE0000) for t in tags)


def reveal(text: str) -> SafeString:
    """HTML-escaped `text` with every hidden code point shown as a badge."""
    if not has_hidden(text):
        return SafeString(escape(text))
    parts = []
    for kind, chunk in _segments(text):
        if kind == "text":
            parts.append(escape(chunk))
        elif kind == "hidden":
            name = unicodedata.name(chunk, "unnamed or control character")
            code = f"{ord(chunk):04X}"
            parts.append(
                format_html('<span class="cl-hidden" title="{}">&lt;U+{}&gt;</span>', name, code)
            )
        else:
            span = f"{len(chunk)} tag characters U+{ord(chunk[0]):04X}…U+{ord(chunk[-1]):04X}"
            parts.append(
                format_html(
                    '<span class="cl-hidden" title="{}">&lt;hidden tag text: “{}”&gt;</span>',
                    span,
                    _decoded(chunk),
                )
            )
    return mark_safe("".join(parts))  # every part above is escaped or format_html


def reveal_plain(text: str) -> str:
    """`text` for a terminal: hidden code points as <U+XXXX>, tag runs decoded."""
    if not has_hidden(text):
        return text
    out = []
    for kind, chunk in _segments(text):
        if kind == "text":
            out.append(chunk)
        elif kind == "hidden":
            out.append(f"<U+{ord(chunk):04X}>")
        else:
            out.append(f"<hidden tag text: {_decoded(chunk)!r}>")
    return "".join(out)
