"""The server's side of lease globs: SQL LIKE prefixes and an in-memory prefix index.

What a pattern covers, and whether two overlap, is mcp_bridge.contract.globs (the one
definition the bridge's guard and recall use too; its docstring states the semantics);
this module re-exports those names for the server and adds what only Postgres-backed
callers need: every path a pattern covers starts with its literal_prefix, so a LIKE on
that prefix, or a PrefixIndex lookup, is a cheap filter in front of the exact test.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator
from typing import Generic, TypeVar

from mcp_bridge.contract.globs import MAX_PATH_LENGTH as MAX_PATH_LENGTH
from mcp_bridge.contract.globs import BadPath as BadPath
from mcp_bridge.contract.globs import covers as covers
from mcp_bridge.contract.globs import literal_prefix as literal_prefix
from mcp_bridge.contract.globs import normalise as normalise
from mcp_bridge.contract.globs import overlaps as overlaps

T = TypeVar("T")


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
