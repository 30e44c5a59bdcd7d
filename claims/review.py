"""Everything a moderator needs to judge one proposed claim, gathered read-only.

The review page shows the claim, its evidence, what the promotion gate would say, and the
claims it most likely duplicates or contradicts. Nothing here writes; deciding is
claims.moderation's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote

from django.db.models import Case, F, Min, Q, When, Window

from claims import conflicts, embeddings, moderation
from claims.models import Claim, ClaimEvent, ClaimQuerySet, Evidence
from fleet import lineage
from fleet.models import Fleet, Session
from mcp_bridge.contract import render

NEIGHBOURS = 5
DUPLICATE_SIMILARITY = conflicts.DUPLICATE_SIMILARITY


@dataclass(frozen=True)
class Neighbour:
    claim: Claim
    why: str  # "same text", "similar", "same subject"
    similarity: float | None = None
    of: Claim | None = None  # the claim under review

    @cached_property
    def comparison(self) -> conflicts.Comparison | None:
        """Both texts token by token, the differing ones marked (neighbour left)."""
        return None if self.of is None else conflicts.compare(self.claim.text, self.of.text)

    @property
    def relation(self) -> str | None:
        """conflicts.DUPLICATE, conflicts.CONFLICT, or None (just related)."""
        if self.why == "same text":
            return conflicts.DUPLICATE
        if self.similarity is None or self.of is None:
            return None
        return conflicts.relation(self.claim.text, self.of.text, self.similarity)

    @property
    def likely_duplicate(self) -> bool:
        return self.relation == conflicts.DUPLICATE

    @property
    def possible_conflict(self) -> bool:
        return self.relation == conflicts.CONFLICT


@dataclass(frozen=True)
class Citation:
    """One piece of evidence as a moderator checks it."""

    evidence: Evidence
    verified: bool  # the fleet saw this session from one of its agents (counts)
    session: Session | None  # its row, for the outcome and summary, when verified
    url: str | None  # path@commit in the repository, when the fleet has a URL template


@dataclass(frozen=True)
class Review:
    claim: Claim
    evidence: list[Citation]
    problems: list[str]
    neighbours: list[Neighbour]
    events: list[ClaimEvent]
    has_embedding: bool
    sessions_now: int  # what the gate would count right now (may exceed the stored count)
    group: Group | None  # the claim's group when it has other live members

    @property
    def unverified(self) -> int:
        return sum(1 for c in self.evidence if not c.verified)


def review_of(claim: Claim) -> Review:
    """Assemble the review page's facts for `claim` (a handful of queries, none per row)."""
    evidence = citations_of(claim)
    verified = {c.evidence.session_id for c in evidence if c.verified}
    return Review(
        claim=claim,
        evidence=evidence,
        problems=moderation.gate_problems(claim),
        neighbours=neighbours_of(claim),
        events=list(claim.events.select_related("actor_user", "actor_agent", "actor_token")),
        has_embedding=claim.embedding is not None,
        # the same count as moderation.session_count, from the rows already fetched
        sessions_now=lineage.independent_among_verified(claim.fleet, verified),
        group=groups_of([claim]).get(group_root(claim)),
    )


def citations_of(claim: Claim) -> list[Citation]:
    """The claim's evidence with, per citation, whether its session is verified, that
    session's row (agent, outcome, summary) and a link to the cited file when possible."""
    cited = list(claim.evidence.select_related("agent"))
    sessions = lineage.verified_session_rows(claim.fleet, [e.session_id for e in cited])
    return [
        Citation(e, e.session_id in sessions, sessions.get(e.session_id), file_url(claim.fleet, e))
        for e in cited
    ]


def file_url(fleet: Fleet, evidence: Evidence) -> str | None:
    """The fleet's repo_url_template filled with repo, path and commit (each URL-quoted);
    None without a template, a path or a commit, or if the result is not http(s)."""
    template = fleet.repo_url_template
    if not template or not evidence.path or not evidence.commit:
        return None
    repo = render.repo_name(evidence.repo).rsplit("/", 1)[-1]  # a template names the last part
    try:
        url = template.format(
            repo=quote(repo, safe=""),
            path=quote(evidence.path.lstrip("/"), safe="/"),
            commit=quote(evidence.commit, safe=""),
        )
    except (KeyError, IndexError, ValueError):
        return None
    return url if url.startswith(("https://", "http://")) else None


def neighbours_of(claim: Claim, k: int = NEIGHBOURS) -> list[Neighbour]:
    """Same-text claims, then the nearest by cosine, then same-subject ones; no repeats."""
    found = [Neighbour(c, "same text", 1.0, claim) for c in exact_matches(claim)]
    found += [n for n in nearest(claim, k) if n.claim.pk not in {f.claim.pk for f in found}]
    seen = {n.claim.pk for n in found}
    found += [
        Neighbour(c, "same subject", None, claim)
        for c in same_subject(claim, k)
        if c.pk not in seen
    ]
    return found


def _others(claim: Claim) -> ClaimQuerySet:
    return Claim.objects.for_fleet(claim.fleet).exclude(pk=claim.pk).select_related("fleet")


def exact_matches(claim: Claim) -> list[Claim]:
    return list(_others(claim).filter(text_hash=claim.text_hash).order_by("number")[:NEIGHBOURS])


def same_subject(claim: Claim, k: int) -> list[Claim]:
    """Other claims on the subject: where a contradiction would show up without embeddings."""
    return list(_others(claim).filter(subject=claim.subject).order_by("-created_at")[:k])


def nearest(claim: Claim, k: int) -> list[Neighbour]:
    """The k nearest claims of the same fleet by cosine similarity (needs an embedding)."""
    return [Neighbour(c, "similar", round(similarity, 3), claim)
            for c, similarity in embeddings.nearest(claim, limit=k, among=_others(claim))]


# Groups ---------------------------------------------------------------------------------
#
# Several sessions proposing the same thing: identical text from a verified session the
# claim lacks is corroboration already (claims.moderation._repeat); anything else close to
# a claim is filed as its own proposal labelled "likely duplicate" of it (near_claim). A
# group is a claim plus the proposals labelled likely duplicates of it — one level, never
# a chain — so the queue can show them together. A label for the moderator, not a merge.

#: The claim a row's group is named after: the claim its "likely duplicate" label points
#: at, else itself. `group_root` is the same rule for a row already fetched.
GROUP_ROOT = Case(
    When(
        near_relation=Claim.NearRelation.DUPLICATE,
        near_claim__isnull=False,
        then=F("near_claim_id"),
    ),
    default=F("pk"),
)
#: The queue's order: groups by their oldest member among the rows in view (oldest first
#: still holds, group by group), a group's members together, each oldest first.
GROUP_ORDERING = (
    Window(Min("created_at"), partition_by=GROUP_ROOT).asc(),
    GROUP_ROOT.asc(),
    "created_at",
    "pk",
)


def group_root(claim: Claim) -> int:
    """`GROUP_ROOT` for a fetched claim."""
    if claim.near_relation == Claim.NearRelation.DUPLICATE and claim.near_claim_id is not None:
        return claim.near_claim_id
    return claim.pk


@dataclass(frozen=True)
class Group:
    """A group with more than one live member, for the queue's column and the review page."""

    root: int  # pk of the claim the group is named after
    members: list[Claim]  # live (proposed or promoted), oldest first
    sessions: int  # independent verified sessions among all members' evidence

    @property
    def proposals(self) -> int:
        return sum(1 for c in self.members if c.status == Claim.Status.PROPOSED)

    @property
    def label(self) -> str:
        """ "3 proposals · 2 sessions"; a promoted root is named: "+ cc-12 promoted"."""
        n = self.proposals
        said = f"{n} proposal{'s' if n != 1 else ''}"
        said += "".join(
            f" + {c.public_id} promoted"
            for c in self.members
            if c.status == Claim.Status.PROMOTED
        )
        return f"{said} · {self.sessions} session{'s' if self.sessions != 1 else ''}"

    @property
    def root_claim(self) -> Claim | None:
        """The claim the group is named after, if it is live (a member)."""
        return next((c for c in self.members if c.pk == self.root), None)

    def others(self, claim: Claim) -> list[Claim]:
        return [c for c in self.members if c.pk != claim.pk]


def groups_of(claims: Sequence[Claim]) -> dict[int, Group]:
    """The groups of `claims` (one page of the queue, or the claim under review) that have
    more than one live member, by root pk.

    A fixed number of queries whatever the page size: the members, their cited session
    ids, then per fleet on the page the verified ones and the handoff graph
    (fleet.lineage.independent_counts, the one rule: unverified ids never count).
    """
    roots = {group_root(c) for c in claims}
    if not roots:
        return {}
    fleets = {c.fleet_id: c.fleet for c in claims}
    members: dict[int, list[Claim]] = {}
    live = Claim.objects.filter(status__in=moderation.LIVE).filter(
        Q(pk__in=roots) | Q(near_claim_id__in=roots, near_relation=Claim.NearRelation.DUPLICATE)
    )
    for member in live.only(*_MEMBER_FIELDS).order_by("created_at", "pk"):
        members.setdefault(group_root(member), []).append(member)
    members = {root: found for root, found in members.items() if len(found) > 1}
    if not members:
        return {}
    cited: dict[int, set[str]] = {}
    pairs = Evidence.objects.filter(claim_id__in=[c.pk for m in members.values() for c in m])
    for claim_id, session_id in pairs.order_by().values_list("claim_id", "session_id").distinct():
        cited.setdefault(claim_id, set()).add(session_id)
    sessions: dict[int, int] = {}
    for fleet_id, fleet in fleets.items():
        mine = [root for root, m in members.items() if m[0].fleet_id == fleet_id]
        ids = [_session_ids(members[root], cited) for root in mine]
        sessions.update(zip(mine, lineage.independent_counts(fleet, ids), strict=True))
    return {root: Group(root, m, sessions.get(root, 0)) for root, m in members.items()}


_MEMBER_FIELDS = ("pk", "fleet_id", "number", "status", "near_claim_id", "near_relation",
                  "created_at", "text", "extractor")


def _session_ids(members: Iterable[Claim], cited: dict[int, set[str]]) -> set[str]:
    return set().union(*(cited.get(c.pk, set()) for c in members))
