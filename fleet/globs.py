"""Path globs for advisory leases, and whether two of them can name the same file.

A lease names a repo-relative path or glob: `*` and `?` match within one path segment,
`**` matches any number of segments, and a lease on a plain path also covers everything
beneath it (a lease on `src/payments` holds `src/payments/api.py`). Character classes
(`[ab]`) are treated as "any one character", so overlap is over-reported, never missed:
leases are advisory, and a false "someone else is here" costs less than a silent collision.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator
from functools import lru_cache
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_PATH_LENGTH = 1024


class BadPath(ValueError):
    """A lease path that cannot name anything inside a repository."""


def normalise(path: str) -> str:
    """Canonical form of a lease path; BadPath for absolute, parent-escaping or empty paths."""
    if not isinstance(path, str):
        raise BadPath("a lease path must be a string")
    cleaned = path.strip().replace("\\", "/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    if not cleaned or cleaned in {".", "/"}:
        raise BadPath("a lease path must not be empty")
    if cleaned.startswith("/"):
        raise BadPath(f"lease paths are repo-relative, not absolute: {path!r}")
    if len(cleaned) > MAX_PATH_LENGTH:
        raise BadPath(f"a lease path is at most {MAX_PATH_LENGTH} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in cleaned):
        raise BadPath("a lease path must not contain control characters")
    segments = [seg for seg in cleaned.split("/") if seg not in {"", "."}]
    if ".." in segments:
        raise BadPath(f"a lease path must not climb out with '..': {path!r}")
    return "/".join(segments) + ("/" if cleaned.endswith("/") else "")


WILDCARDS = frozenset("*?[")


def literal_prefix(pattern: str) -> str:
    """The leading segments without wildcards, with a trailing slash ("src/payments/").

    Every path a pattern covers starts with these segments, so two patterns can only
    overlap when one's literal prefix starts with the other's: a cheap, indexable filter
    in front of the exact `overlaps`.
    """
    literal = []
    for segment in _covering_segments(pattern):
        if WILDCARDS & set(segment):
            break
        literal.append(segment)
    return "".join(f"{segment}/" for segment in literal)


def like_pattern(prefix: str) -> str:
    """A SQL LIKE pattern (with ESCAPE '\\') matching strings that start with `prefix`."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def prefixes_of(prefix: str) -> list[str]:
    """ "a/b/" → ["", "a/", "a/b/"]: the literal prefixes that `prefix` starts with."""
    parts = [p for p in prefix.split("/") if p]
    return ["".join(f"{q}/" for q in parts[:i]) for i in range(len(parts) + 1)]


class PrefixIndex(Generic[T]):
    """Items filed under a literal prefix, to find the ones that may overlap a pattern
    without comparing it with every item: two patterns can only overlap when one's
    literal prefix starts with the other's (see literal_prefix)."""

    def __init__(self) -> None:
        self._items: dict[str, list[T]] = {}
        self._prefixes: list[str] = []  # sorted: the ones starting with P follow P

    def add(self, prefix: str, item: T) -> None:
        if prefix not in self._items:
            self._items[prefix] = []
            insort(self._prefixes, prefix)
        self._items[prefix].append(item)

    def near(self, prefix: str) -> Iterator[T]:
        """Items whose prefix is a start of `prefix`, or starts with it."""
        for start in prefixes_of(prefix):
            yield from self._items.get(start, ())
        i = bisect_right(self._prefixes, prefix)
        while i < len(self._prefixes) and self._prefixes[i].startswith(prefix):
            yield from self._items[self._prefixes[i]]
            i += 1


def overlaps(a: str, b: str) -> bool:
    """True when some file path could be covered by both lease patterns."""
    return _segments_intersect(_covering_segments(a), _covering_segments(b))


def covers(pattern: str, path: str) -> bool:
    """True when the lease `pattern` covers the concrete `path`."""
    return _segments_intersect(_covering_segments(pattern), tuple(normalise(path).split("/")))


def _covering_segments(pattern: str) -> tuple[str, ...]:
    segments = tuple(seg for seg in normalise(pattern).split("/") if seg)
    return segments if segments[-1:] == ("**",) else (*segments, "**")


@lru_cache(maxsize=4096)
def _segments_intersect(p: tuple[str, ...], q: tuple[str, ...]) -> bool:
    """Can one sequence of path segments match both segment patterns? (`**` = any run)."""
    if not p and not q:
        return True
    if p and p[0] == "**":
        return _segments_intersect(p[1:], q) or (bool(q) and _segments_intersect(p, q[1:]))
    if q and q[0] == "**":
        return _segments_intersect(p, q[1:]) or (bool(p) and _segments_intersect(p[1:], q))
    if not p or not q:
        return False
    return _segment_intersect(_tokens(p[0]), _tokens(q[0])) and _segments_intersect(p[1:], q[1:])


def _tokens(segment: str) -> tuple[str, ...]:
    """Split a segment into literal characters, '*', and '?' (a class counts as '?')."""
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        close = segment.find("]", i + 2) if ch == "[" else -1
        if close != -1:
            out.append("?")
            i = close + 1
            continue
        if ch == "*" and out[-1:] == ["*"]:
            i += 1  # "**" inside a segment is just "*"
            continue
        out.append(ch)
        i += 1
    return tuple(out)


@lru_cache(maxsize=4096)
def _segment_intersect(p: tuple[str, ...], q: tuple[str, ...]) -> bool:
    """Can one string match both single-segment wildcard patterns?"""
    if not p and not q:
        return True
    if p and p[0] == "*":
        return _segment_intersect(p[1:], q) or (bool(q) and _segment_intersect(p, q[1:]))
    if q and q[0] == "*":
        return _segment_intersect(p, q[1:]) or (bool(p) and _segment_intersect(p[1:], q))
    if not p or not q:
        return False
    if p[0] != q[0] and "?" not in (p[0], q[0]):
        return False
    return _segment_intersect(p[1:], q[1:])
