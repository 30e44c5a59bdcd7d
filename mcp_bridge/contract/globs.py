"""Lease path globs: which files a pattern covers, and whether two patterns can share one.

The one definition, for every place a lease pattern meets a path: the server's contention
check and staleness marks (fleet/globs.py builds its SQL prefix filters on these), the
bridge's commit/PreToolUse guard, path-scoped recall and the briefing's path claims
(ranking.path_related). Stdlib only and cheap to import: the guard runs in a hook that
starts a fresh interpreter before every edit.

A pattern is a repo-relative path, read segment by segment (`/` separates):

- `*` matches any run of characters within one segment, `?` exactly one; `**` as a whole
  segment matches any number of segments, none included (`src/**/x.py` covers `src/x.py`);
  `**` inside a segment (`a**b`) is just `*`.
- `[ab]`, `[a-z]` match one character of the class, `[!ab]` and `[^ab]` one not in it (as
  git's wildmatch); `]` first in a class is a member; a `[` with no closing `]` is literal.
- Dot-files are not special: `*`, `?` and `**` match a leading `.` (`src/*` covers
  `src/.env`). A lease is a warning about someone else's work; hiding `.github/` or
  `.env` from `*` would silently miss a collision.
- Case-sensitive, as git's index is: `README.md` does not cover `readme.md`.
- A pattern covers what it matches and everything beneath it (`src/payments` holds
  `src/payments/api.py`; `src/*` holds `src/pkg/a.py`). A trailing `/` means the same:
  the directory and everything under it, so `docs`, `docs/` and `docs/**` are one lease.
- A pattern also names its own literal text, as a git pathspec does: `app/[id]/page.tsx`
  covers the file of that very name (a Next.js route) as well as `app/i/page.tsx`. Since
  that is how a metacharacter is matched literally, there is no escape character:
  a backslash is a path separator (`src\\app.py` is `src/app.py`, as Windows writes it).
- `./` and empty segments are dropped. A pattern or path that cannot name anything inside
  a repository (empty, absolute, climbing out with `..`, control characters, over
  MAX_PATH_LENGTH) is a BadPath to `normalise`; `covers` and `overlaps` say False for it.

`overlaps(a, b)` is exact, not a heuristic: it is True when some path is covered by both.
`holds(directory, pattern)`: everything the pattern covers lies beneath the directory.
"""

from __future__ import annotations

# `typing` costs the PreToolUse script (mcp_bridge/pretool.py) ~3 ms at every spawn, and
# only the annotations need it; `functools` (with `collections`) costs it 2-8 ms, so the
# memo below stands in for lru_cache.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Final, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])


def _memo(maxsize: int) -> Callable[[F], F]:
    """Remember up to `maxsize` answers of a pure function of hashable arguments; a full
    memo starts over (these are patterns and segments: a working set, not a history)."""
    def wrap(fn: F) -> F:
        memo: dict[tuple[Any, ...], Any] = {}

        def memoized(*args: Any) -> Any:
            try:
                return memo[args]
            except KeyError:
                pass
            if len(memo) >= maxsize:
                memo.clear()
            value = memo[args] = fn(*args)
            return value

        memoized.__doc__, memoized.__wrapped__ = fn.__doc__, fn  # type: ignore[attr-defined]
        memoized.cache_clear = memo.clear  # type: ignore[attr-defined]
        return memoized  # type: ignore[return-value]
    return wrap

MAX_PATH_LENGTH: Final = 1024
WILDCARDS: Final = frozenset("*?[")
_LAST: Final = 0x10FFFF  # the highest code point: a negated class is its complement up to it

# A character token is a literal character, or a class: its code points as sorted,
# disjoint (lo, hi) intervals. STAR is `*`; GLOBSTAR, in place of a segment, is `**`.
Chars = tuple[tuple[int, int], ...]
Token = str | Chars | None
Segment = tuple[Token, ...] | None
STAR: Final = None
GLOBSTAR: Final = None
_ANY: Final[Chars] = ((0, _LAST),)
_CONTROL: Final = dict.fromkeys([*range(0x20), 0x7F])  # str.translate deletes these


class BadPath(ValueError):
    """A lease path that cannot name anything inside a repository."""


def segments(path: str) -> tuple[str, ...]:
    """A path's segments, without empty and "." ones (backslashes count as slashes)."""
    return tuple(s for s in path.strip().replace("\\", "/").split("/") if s not in ("", "."))


def normalise(path: str) -> str:
    """Canonical form of a lease path; BadPath for absolute, parent-escaping or empty paths.

    A trailing slash is kept (it reads as "this directory" to people); it covers the same.
    """
    if not isinstance(path, str):
        raise BadPath("a lease path must be a string")
    cleaned = path.strip().replace("\\", "/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    if cleaned.startswith("/"):
        raise BadPath(f"lease paths are repo-relative, not absolute: {path!r}")
    if len(cleaned) > MAX_PATH_LENGTH:
        raise BadPath(f"a lease path is at most {MAX_PATH_LENGTH} characters")
    if cleaned.translate(_CONTROL) != cleaned:
        raise BadPath("a lease path must not contain control characters")
    parts = segments(cleaned)
    if not parts:
        raise BadPath("a lease path must not be empty")
    if ".." in parts:
        raise BadPath(f"a lease path must not climb out with '..': {path!r}")
    return "/".join(parts) + ("/" if cleaned.endswith("/") else "")


def canonical(path: str) -> str:
    """`normalise(path)`, or `path` unchanged when it names nothing in a repository.

    For stored citations: the server's SQL prefix filters compare stored text, so a
    claim citing `./src/app.py` must be stored as `src/app.py` to be found by a lease on
    `src/**`; a citation that names no repo path is kept as written (it covers nothing).
    """
    try:
        return normalise(path)
    except BadPath:
        return path


def literal_segments(pattern: str) -> tuple[str, ...]:
    """The leading segments without wildcards ("src/pay*/x" → ("src",)).

    Every path a pattern covers starts with them (its literal reading included), which
    makes them the indexable filter in front of `covers` and `overlaps`.
    """
    out = []
    for segment in segments(pattern):
        if WILDCARDS & set(segment):
            break
        out.append(segment)
    return tuple(out)


@_memo(maxsize=16384)
def literal_prefix(pattern: str) -> str:
    """literal_segments of the normalised pattern, each with its slash ("src/payments/");
    BadPath as `normalise`. Two patterns can only overlap when one's starts with the
    other's. Remembered: a drain batch asks it for one lease path up to five times (the
    planner, the holders query, the upsert, the answer, the staleness marks)."""
    return "".join(f"{segment}/" for segment in literal_segments(normalise(pattern)))


def covers(pattern: str, path: str) -> bool:
    """True when the lease `pattern` covers the concrete repo-relative `path`."""
    pat, concrete = _parsed(pattern), _parsed(path)
    if pat is None or concrete is None:
        return False
    parts, glob = pat
    if concrete[0][: len(parts)] == parts:  # the literal reading: the path, or beneath it
        return True
    return glob is not None and _match(glob, concrete[0])


def overlaps(a: str, b: str) -> bool:
    """True when some file path could be covered by both lease patterns."""
    pa, pb = _parsed(a), _parsed(b)
    if pa is None or pb is None:
        return False
    (parts_a, _), (parts_b, _) = pa, pb
    if parts_a[: len(parts_b)] == parts_b or parts_b[: len(parts_a)] == parts_a:
        return True  # both literal readings: one lies beneath the other
    return any(_meet(x, y) for x in _forms(pa) for y in _forms(pb))


def holds(directory: str, pattern: str) -> bool:
    """True when every path `pattern` covers lies at or beneath `directory` (a claim
    citing `src` is about a lease on `src/payments/**`): `directory` starts its literal
    prefix."""
    try:
        held, literal = segments(normalise(directory)), literal_segments(normalise(pattern))
    except BadPath:
        return False
    return literal[: len(held)] == held and len(held) <= len(literal)


Parsed = tuple[tuple[str, ...], tuple[Segment, ...] | None]


@_memo(maxsize=4096)
def _parsed(text: str) -> Parsed | None:
    """(segments, glob form or None when there is no wildcard); None for a BadPath.

    Cached: the PreToolUse hook asks about every lease in the roster, the server about
    the same leases over and over.
    """
    try:
        parts = segments(normalise(text))
    except BadPath:
        return None
    if not any(WILDCARDS & set(part) for part in parts):
        return parts, None
    glob = tuple(GLOBSTAR if part == "**" else _tokens(part) for part in parts)
    return parts, (glob if glob[-1:] == (GLOBSTAR,) else (*glob, GLOBSTAR))


def _forms(parsed: Parsed) -> tuple[tuple[Segment, ...], ...]:
    """The pattern read as a glob and, when that differs, literally; each with its subtree."""
    parts, glob = parsed
    literal = _literal(parts)
    return (literal,) if glob is None else (glob, literal)


def _match(glob: tuple[Segment, ...], parts: tuple[str, ...]) -> bool:
    """Does the concrete path `parts` match the parsed glob? (`**` runs of segments)"""
    return _greedy(glob, parts, lambda seg, part: seg is not None and _segment(seg, part))


def _segment(tokens: tuple[Token, ...], text: str) -> bool:
    return _greedy(tokens, text, _char_matches)


def _char_matches(token: Token, ch: str) -> bool:
    return token == ch or (type(token) is tuple and _has(token, ord(ch)))


def _greedy(pattern: tuple[Any, ...], items: Sequence[Any],
            one: Callable[[Any, Any], bool]) -> bool:
    """Wildcard matching with one backtrack point (None in `pattern` matches any run of
    items), in O(len(pattern) × len(items)) at worst: a lease of `*a*a*a…b` cannot stall
    the hook as naive recursion would."""
    p = i = 0
    star, mark = -1, 0
    while i < len(items):
        if p < len(pattern) and pattern[p] is None:
            star, mark, p = p, i, p + 1
        elif p < len(pattern) and one(pattern[p], items[i]):
            p, i = p + 1, i + 1
        elif star != -1:
            p, mark = star + 1, mark + 1
            i = mark
        else:
            return False
    return all(tok is None for tok in pattern[p:])


def _has(chars: Chars, code: int) -> bool:
    return any(lo <= code <= hi for lo, hi in chars)


def _literal(parts: tuple[str, ...]) -> tuple[Segment, ...]:
    """The pattern's literal reading, every character itself, with its subtree."""
    return (*(tuple(part) for part in parts), GLOBSTAR)


@_memo(maxsize=4096)
def _tokens(part: str) -> tuple[Token, ...]:
    """One segment as STAR and character tokens ("a*[!b]" → a, STAR, not-b)."""
    out: list[Token] = []
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            if not out or out[-1] is not STAR:  # "**" inside a segment is "*"
                out.append(STAR)
            i += 1
        elif ch == "?":
            out.append(_ANY)
            i += 1
        elif ch == "[" and (parsed := _char_class(part, i)) is not None:
            chars, i = parsed
            out.append(chars)
        else:
            out.append(ch)
            i += 1
    return tuple(out)


def _char_class(part: str, start: int) -> tuple[Chars, int] | None:
    """The class opening at part[start] ("[") and the index after it; None if unclosed."""
    i = start + 1
    negated = i < len(part) and part[i] in "!^"
    i += negated
    close = part.find("]", i + 1 if part[i : i + 1] == "]" else i)
    if close == -1:
        return None
    body, k = part[i:close], 0
    ranges: list[tuple[int, int]] = []
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            ranges.append((ord(body[k]), ord(body[k + 2])))  # a reversed range is empty
            k += 3
        else:
            ranges.append((ord(body[k]), ord(body[k])))
            k += 1
    chars = _union(ranges)
    return (_complement(chars) if negated else chars), close + 1


def _union(ranges: list[tuple[int, int]]) -> Chars:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(r for r in ranges if r[0] <= r[1]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _complement(chars: Chars) -> Chars:
    out, nxt = [], 0
    for lo, hi in chars:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    return tuple(out + ([(nxt, _LAST)] if nxt <= _LAST else []))


def _chars_meet(p: str | Chars, q: str | Chars) -> bool:
    p = ((ord(p), ord(p)),) if isinstance(p, str) else p
    q = ((ord(q), ord(q)),) if isinstance(q, str) else q
    return any(a <= d and c <= b for a, b in p for c, d in q)


@_memo(maxsize=16384)
def _meet(p: tuple[Segment, ...], q: tuple[Segment, ...]) -> bool:
    """Can one sequence of segments match both segment patterns? (GLOBSTAR = any run)."""
    if not p and not q:
        return True
    if p and p[0] is GLOBSTAR:
        return _meet(p[1:], q) or (bool(q) and _meet(p, q[1:]))
    if q and q[0] is GLOBSTAR:
        return _meet(p, q[1:]) or (bool(p) and _meet(p[1:], q))
    if not p or not q:
        return False
    first_p, first_q = p[0], q[0]
    assert first_p is not None and first_q is not None  # GLOBSTAR (None) handled above
    return _segment_meet(first_p, first_q) and _meet(p[1:], q[1:])


@_memo(maxsize=16384)
def _segment_meet(p: tuple[Token, ...], q: tuple[Token, ...]) -> bool:
    """Can one (non-empty) segment string match both token sequences?"""
    if not p and not q:
        return True
    if p and p[0] is STAR:
        return _segment_meet(p[1:], q) or (bool(q) and _segment_meet(p, q[1:]))
    if q and q[0] is STAR:
        return _segment_meet(p, q[1:]) or (bool(p) and _segment_meet(p[1:], q))
    if not p or not q:
        return False
    # Neither head is STAR (None) here; mypy does not narrow through the STAR alias.
    a, b = p[0], q[0]
    assert a is not None and b is not None
    return _chars_meet(a, b) and _segment_meet(p[1:], q[1:])
