"""clean_value(): the read-side cleaner every cache value passes before a tool returns it.

Everything in the cache was written by other agents' sessions. A string that renders
differently from what it says (hidden tag characters, bidi overrides, zero-width joins)
is how an injected instruction hides inside an innocent-looking claim, so invisible and
direction-changing code points are removed, and every string is length-bounded with a
visible marker. It recurses over the whole JSON value — keys too — because the renderer's
schema can grow fields this module never heard of. docs/bridge.md lists the exact set.
"""

from __future__ import annotations

import re
from typing import Any

from mcp_bridge.contract.events import MAX_JSON_DEPTH

TRUNCATED = "…[truncated]"

# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties) in full, plus the C0/C1
# controls except TAB/LF/CR, the interlinear annotation controls, and lone surrogates.
_STRIP_RANGES = (
    (0x0000, 0x0008), (0x000B, 0x000C), (0x000E, 0x001F), (0x007F, 0x009F),  # controls
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x115F, 0x1160),  # Hangul choseong/jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian variation selectors and vowel separator
    (0x200B, 0x200F),  # ZWSP, ZWNJ, ZWJ, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated formats
    (0x3164, 0x3164),  # Hangul filler
    (0xD800, 0xDFFF),  # lone surrogates (unencodable; json.loads lets them through)
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFEFF, 0xFEFF),  # BOM / zero-width no-break space
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFFB),  # unassigned specials + interlinear annotation controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol formatting controls
    (0xE0000, 0xE0FFF),  # tag characters (E0000–E007F), VS supplement, reserved
)
_STRIP_RE = re.compile(
    "[" + "".join(f"\\U{lo:08X}-\\U{hi:08X}" for lo, hi in _STRIP_RANGES) + "]"
)


def is_stripped(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _STRIP_RANGES)


def clean_text(text: str, max_chars: int = 2000) -> str:
    """Strip hiding code points, then bound the length with a visible marker.

    Printable ASCII holds none of them, and most cache strings are printable ASCII: for
    those the regex is skipped (a search's answer cleans ~240 strings; two C-level checks
    cost about a quarter of the regex call)."""
    if not (text.isascii() and text.isprintable()):
        text = _STRIP_RE.sub("", text)
    if len(text) > max_chars:
        return text[:max_chars] + TRUNCATED
    return text


def clean_value(value: Any, max_chars: int = 2000, _depth: int = 0) -> Any:
    """Clean every string in a JSON value, keys included; containers nested deeper than
    MAX_JSON_DEPTH (100, what every front door accepts) become the marker."""
    if isinstance(value, str):
        return clean_text(value, max_chars)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if _depth >= MAX_JSON_DEPTH:
        return TRUNCATED  # deeper than any front door accepts JSON (events.MAX_JSON_DEPTH)
    if isinstance(value, dict):
        return {
            clean_text(str(k), max_chars): clean_value(v, max_chars, _depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean_value(v, max_chars, _depth + 1) for v in value]
    return clean_text(str(value), max_chars)  # not JSON; never hand it through raw
