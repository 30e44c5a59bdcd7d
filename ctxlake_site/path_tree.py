"""Leases as a tree of path segments, for people: who holds what, and where it collides.

A flat list of 40 globs hides that two agents are both under `src/payments/`; a tree puts
them side by side. Pure data in, pure data out (no Django): the team page's query module
feeds it lease rows and the template renders the nodes as nested lists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mcp_bridge.contract.globs import segments


@dataclass(frozen=True)
class Holding:
    """One lease as the tree shows it; `overlaps_with` names the other holders whose
    leases overlap this one (empty: nobody else is there)."""

    agent_id: str
    path: str
    overlaps_with: tuple[str, ...] = ()

    @property
    def contended(self) -> bool:
        return bool(self.overlaps_with)


@dataclass
class Node:
    """A run of path segments; `holders` hold a lease whose path ends here."""

    label: str
    holders: list[Holding] = field(default_factory=list)
    kids: dict[str, Node] = field(default_factory=dict)

    @property
    def children(self) -> list[Node]:
        return [self.kids[name] for name in sorted(self.kids)]

    @property
    def contended(self) -> bool:
        """Some lease at or under this node overlaps another agent's: the branch to open."""
        here = any(h.contended for h in self.holders)
        return here or any(kid.contended for kid in self.kids.values())


def build(holdings: Iterable[Holding]) -> list[Node]:
    """The top-level nodes of the tree of `holdings`' paths, sorted by label.

    A chain of directories that hold nothing and branch nowhere is folded into one node
    ("src/payments/"), so a deep path costs one level of indentation on a phone, not six.
    """
    root = Node("")
    for holding in holdings:
        node = root
        for part in segments(holding.path) or (holding.path,):
            node = node.kids.setdefault(part, Node(part))
        node.holders.append(holding)
    for node in root.kids.values():
        _fold(node)
    for node in _walk(root):
        node.holders.sort(key=lambda h: (h.agent_id, h.path))
    return root.children


def _fold(node: Node) -> None:
    while not node.holders and len(node.kids) == 1:
        (only,) = node.kids.values()
        node.label, node.holders, node.kids = f"{node.label}/{only.label}", only.holders, only.kids
    for kid in node.kids.values():
        _fold(kid)


def _walk(node: Node) -> Iterable[Node]:
    yield node
    for kid in node.kids.values():
        yield from _walk(kid)
