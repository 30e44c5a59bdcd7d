"""Spans over text, as the contract's two scanners find them: the redactor and the
instruction screen. Stdlib only.

Both scan a copy of the text with its invisible characters taken out — so a word split by
a zero-width space is still the word — and report spans that must land on the original
text, hidden characters inside included; both then union overlapping spans, the earliest
rule in their table naming the union. One definition of each step, here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from mcp_bridge.contract import sanitize

T = TypeVar("T")
_TAGS = (0xE0000, 0xE0FFF)


def invisible_class(*, tags: bool = True) -> str:
    """A regex character class of what renders as nothing: the read-side cleaner's set
    (sanitize._STRIP_RANGES) less the C0/C1 controls (not invisible in a log line; TAB and
    LF separate tokens) and lone surrogates; less the tag characters when `tags` is False
    (the screen keeps them: one of its rules reads the ASCII they spell)."""
    return "[" + "".join(
        f"\\U{lo:08X}-\\U{hi:08X}" for lo, hi in sanitize._STRIP_RANGES
        if lo >= 0xA0 and not 0xD800 <= lo <= 0xDFFF and (tags or (lo, hi) != _TAGS)) + "]"


def visible(text: str, hidden: Any) -> tuple[str, list[int] | None]:
    """The text without the characters `hidden` (a compiled class) matches, and each kept
    character's original index; (text, None) when there is nothing to take out."""
    if not hidden.search(text):
        return text, None
    index = [i for i, ch in enumerate(text) if not hidden.match(ch)]
    return "".join(text[i] for i in index), index


def original(index: list[int] | None, n: int, start: int, end: int) -> tuple[int, int]:
    """A span of the visible text as a span of the original (`n` characters long)."""
    if index is None:
        return start, end
    return index[start], index[end - 1] + 1 if end - 1 < len(index) else n


def merge(found: Iterable[tuple[int, int, int, T]]) -> list[tuple[int, int, T]]:
    """Union overlapping (start, end, rule order, what) spans; the earliest rule in the
    table (lowest order) names the union."""
    out: list[list[Any]] = []
    for start, end, order, what in sorted(found, key=lambda s: s[:3]):
        if out and start < out[-1][1]:
            last = out[-1]
            last[1] = max(last[1], end)
            if order < last[2]:
                last[2], last[3] = order, what
        else:
            out.append([start, end, order, what])
    return [(s, e, w) for s, e, _, w in out]
