"""Which events of a drain batch may be applied together, one kind at a time.

A batch applier (workers.BATCH_APPLIERS) applies a run of events of one kind in one or
two statements instead of a few per event. That is only allowed where the outcome —
every row written and every event's recorded result — is what applying the events one by
one, in spool order, would give. `segments` cuts a batch into consecutive runs for which
that holds when each run is applied kind by kind in APPLY_ORDER (claims, then releases,
then handoffs, then the rest), each kind in spool order.

Applying in that order reorders an event only past events of kinds that come later in
APPLY_ORDER, so a segment is cut where such a move would change something:

- an agent's lease operation after its own release of the same path, or of everything
  (the claim would be applied before the release that preceded it);
- an agent releasing a path it already released here, or releasing everything next to
  another release of its own, or any lease operation after it offered its leases with a
  handoff (the offer is applied after every claim and release of the segment);
- a claim after another agent released an overlapping path, or everything (the claim's
  recorded contention would still see the released lease);
- the same agent claiming the same path twice (one statement cannot upsert a row twice);
- the same session ended twice (the second end updates the first).

Everything else is safe: claim_many and propose_many walk their requests in order (each
claim's contention includes earlier claims of the run), a release applied after claims
that preceded it sees them as the sequence would, and handoffs without lease offers,
session ends and claim proposals touch nothing the others read. What sessions were shown
and used, and agents' feedback, are recounted from their rows whatever the order they
land in (claims.tallies), and come after the proposals of their segment. An event whose footprint
cannot be read (a malformed path list, say) gets a segment of its own; its applier then
dead-letters it as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleet.globs import BadPath, PrefixIndex, literal_prefix, normalise, overlaps
from fleet.spool_apply import Envelope
from mcp_bridge import contract

CLAIM, RELEASE, OFFER = "claim", "release", "offer"
APPLY_ORDER = (
    contract.KIND_LEASE_CLAIM,
    contract.KIND_LEASE_RELEASE,
    contract.KIND_HANDOFF_CREATE,
    contract.KIND_SESSION_END,
    contract.KIND_CLAIM_PROPOSED,
    contract.KIND_CLAIM_SERVED,
    contract.KIND_CLAIM_FEEDBACK,
)


@dataclass(frozen=True)
class Footprint:
    """What an event touches, as far as reordering it is concerned."""

    kind: str
    agent: int
    lease_op: str | None = None  # CLAIM, RELEASE or OFFER when it touches the agent's leases
    paths: tuple[tuple[str, str], ...] = ()  # (normalised path, literal prefix)
    release_all: bool = False
    session: int | None = None
    alone: bool = False  # unreadable: commutes with nothing


def footprint(event: Envelope) -> Footprint:
    payload, agent = event.payload, event.agent.pk
    try:
        if event.kind == contract.KIND_LEASE_CLAIM:
            return Footprint(event.kind, agent, CLAIM, _paths(payload.get("paths")))
        if event.kind == contract.KIND_LEASE_RELEASE:
            paths = _paths(payload.get("paths", []))
            release_all = payload.get("all") is True or not paths
            return Footprint(event.kind, agent, RELEASE, paths, release_all=release_all)
    except (BadPath, TypeError):
        return Footprint(event.kind, agent, alone=True)
    if event.kind == contract.KIND_HANDOFF_CREATE:
        offers = event.payload.get("transfer_leases") is True
        return Footprint(event.kind, agent, OFFER if offers else None)
    if event.kind == contract.KIND_SESSION_END:
        return Footprint(event.kind, agent, session=event.session.pk if event.session else None)
    if event.kind not in APPLY_ORDER:
        return Footprint(event.kind, agent, alone=True)
    return Footprint(event.kind, agent)


def _paths(value: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    normalised = dict.fromkeys(normalise(p) for p in value)
    return tuple((path, literal_prefix(path)) for path in normalised)


@dataclass
class _Segment:
    members: list[int] = field(default_factory=list)
    claimed: dict[int, set[str]] = field(default_factory=dict)  # agent → paths it claimed
    released: dict[int, set[str]] = field(default_factory=dict)  # agent → paths it released
    releasing_all: set[int] = field(default_factory=set)
    releases: PrefixIndex[tuple[int, str]] = field(default_factory=PrefixIndex)
    offered: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)
    closed: bool = False  # holds an event that must stay alone

    def admits(self, fp: Footprint) -> bool:
        if self.closed or (fp.alone and self.members):
            return False
        if fp.session is not None and fp.session in self.ended:
            return False
        if fp.lease_op is None:
            return True
        if fp.agent in self.offered:
            return False
        if fp.lease_op == RELEASE:
            if fp.agent in self.releasing_all:
                return False
            if fp.release_all:
                return fp.agent not in self.released
            return not {path for path, _ in fp.paths} & self.released.get(fp.agent, set())
        if fp.lease_op == OFFER:
            return True
        names = {path for path, _ in fp.paths}  # CLAIM
        if names & self.claimed.get(fp.agent, set()):
            return False
        if names & self.released.get(fp.agent, set()) or self.releasing_all:
            return False
        return not any(
            other != fp.agent and overlaps(path, released)
            for path, prefix in fp.paths
            for other, released in self.releases.near(prefix)
        )

    def add(self, index: int, fp: Footprint) -> None:
        self.members.append(index)
        self.closed = fp.alone
        if fp.kind == contract.KIND_SESSION_END and fp.session is not None:
            self.ended.add(fp.session)
        if fp.lease_op == CLAIM:
            self.claimed.setdefault(fp.agent, set()).update(path for path, _ in fp.paths)
        elif fp.lease_op == RELEASE:
            self.released.setdefault(fp.agent, set()).update(path for path, _ in fp.paths)
            for path, prefix in fp.paths:
                self.releases.add(prefix, (fp.agent, path))
            if fp.release_all:
                self.releasing_all.add(fp.agent)
        elif fp.lease_op == OFFER:
            self.offered.add(fp.agent)


def segments(events: Sequence[Envelope]) -> list[list[int]]:
    """Indices of `events`, cut into consecutive runs that may be applied in APPLY_ORDER."""
    runs: list[list[int]] = []
    current = _Segment()
    for i, event in enumerate(events):
        fp = footprint(event)
        if not current.admits(fp):
            runs.append(current.members)
            current = _Segment()
        current.add(i, fp)
    if current.members:
        runs.append(current.members)
    return runs


def in_apply_order(kinds: dict[str, list[int]]) -> list[tuple[str, list[int]]]:
    """A segment's events grouped by kind, the groups in APPLY_ORDER."""
    rank = {kind: i for i, kind in enumerate(APPLY_ORDER)}
    return sorted(kinds.items(), key=lambda item: rank.get(item[0], len(rank)))
