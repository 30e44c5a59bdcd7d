"""What the team page shows, per fleet the person moderates: read-only, as plain dataclasses.

Every rule comes from its owner: which fleets are the person's is the admin's
(claims.admin_scope, as in the admin index's pipeline panel); which agents are active is
the rendered roster's (fleet.models.Agent.active); which leases overlap is
fleet.leases.contention_among (mcp_bridge.contract.globs.overlaps, the one matcher);
the pipeline reading is pipeline_status.for_fleet, the one doctor and the admin show;
possibly stale is claims.staleness.STALE_Q, flagged is fleet.screen_view's state.

The page refreshes itself every 30 seconds, so its cost must not grow with the fleet:
each kind of row is read for all of the person's fleets in one query (agents, leases,
handoffs, claim counts, activity per day, claim events per day), then split by fleet in
Python. Only the pipeline reading is per fleet (a handful of queries each, whatever the
fleet holds), because that is how its owner reads it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any, cast

from django.db.models import Count, Min, Q, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from claims.admin_scope import granted_fleets
from claims.models import Claim, ClaimEvent
from claims.staleness import STALE_Q
from ctxlake_site import path_tree, pipeline_status
from fleet import leases as lease_rules
from fleet import screen_view
from fleet.models import Activity, Agent, Fleet, Handoff, Lease

DAYS = 30  # the charts' window, today included
TREE_LEASES = 300  # per fleet; overlapping leases are shown first, then by path


@dataclass(frozen=True)
class AgentRow:
    agent_id: str
    runtime: str
    last_seen_at: datetime | None
    leases: int


@dataclass(frozen=True)
class Overlap:
    """Two agents' live leases whose paths overlap (advisory: both are told, none refused)."""

    agents: tuple[str, str]
    paths: tuple[str, str]


@dataclass(frozen=True)
class HandoffRow:
    pk: int
    from_agent: str
    status: str
    summary: str  # as agents read it: the withheld marker while the screen holds it back
    withheld: bool
    created_at: datetime


@dataclass(frozen=True)
class Memory:
    proposals: int  # the moderation queue
    oldest_proposal: datetime | None
    promoted: int
    stale: int  # live claims marked possibly stale
    flagged: int  # claims whose text the instruction screen withholds from agents


@dataclass(frozen=True)
class Daily:
    """Counts per day over the charts' window, one list per series, oldest day first."""

    days: list[date]
    series: dict[str, list[int]]

    @property
    def legend(self) -> list[tuple[int, str, int]]:
        """(position, series name, total over the window), in the chart's colour order."""
        return [(i, name, sum(values)) for i, (name, values) in enumerate(self.series.items())]


@dataclass
class FleetView:
    fleet: Fleet
    agents: list[AgentRow] = field(default_factory=list)
    tree: list[path_tree.Node] = field(default_factory=list)
    overlaps: list[Overlap] = field(default_factory=list)
    leases_total: int = 0
    leases_shown: int = 0
    handoffs: list[HandoffRow] = field(default_factory=list)
    pipeline: pipeline_status.FleetPipeline | None = None
    pipeline_error: str = ""
    memory: Memory = Memory(0, None, 0, 0, 0)
    activity: Daily | None = None
    claims: Daily | None = None


@dataclass(frozen=True)
class TeamPage:
    fleets: list[FleetView]
    now: datetime
    days: int = DAYS

    @property
    def active_minutes(self) -> int:
        return int(Agent.ACTIVE_WINDOW.total_seconds() // 60)


def team_page(user: Any, *, now: datetime | None = None) -> TeamPage:
    """The whole page for `user`: one FleetView per fleet they moderate, by slug."""
    now = now or timezone.now()
    views = {f.pk: FleetView(f) for f in granted_fleets(user).order_by("slug")}
    if views:
        ids = list(views)
        _agents_and_leases(views, ids, now)
        _handoffs(views, ids)
        _memory(views, ids)
        _charts(views, ids, now)
        for view in views.values():
            _pipeline(view)
    return TeamPage(list(views.values()), now)


def _agents_and_leases(views: dict[int, FleetView], ids: list[int], now: datetime) -> None:
    live = Lease.objects.active(at=now).filter(fleet__in=ids)
    agents = (
        Agent.objects.filter(fleet__in=ids)
        .filter(Agent.active(now, live.values("agent_id")))
        .order_by("agent_id")
    )
    leases = list(
        live.select_related("agent")
        .only("fleet_id", "agent_id", "path", "prefix", "agent__agent_id")
        .order_by("path", "agent__agent_id")
    )
    by_fleet: dict[int, list[Lease]] = defaultdict(list)
    for lease in leases:
        by_fleet[lease.fleet_id].append(lease)
    held = Counter(lease.agent_id for lease in leases)
    for agent in agents:
        views[agent.fleet_id].agents.append(
            AgentRow(agent.agent_id, agent.runtime, agent.last_seen_at, held.get(agent.pk, 0))
        )
    for fleet_id, rows in by_fleet.items():
        _lease_tree(views[fleet_id], rows)


def _lease_tree(view: FleetView, rows: list[Lease]) -> None:
    """The fleet's overlaps, and its tree of the first TREE_LEASES leases (contended first)."""
    partners: dict[int, set[str]] = defaultdict(set)
    for pair in lease_rules.contention_among(rows):
        mine, theirs = pair.mine, pair.theirs
        partners[mine.pk].add(theirs.agent.agent_id)
        partners[theirs.pk].add(mine.agent.agent_id)
        view.overlaps.append(
            Overlap((mine.agent.agent_id, theirs.agent.agent_id), (mine.path, theirs.path))
        )
    shown = sorted(rows, key=lambda r: (r.pk not in partners, r.path))[:TREE_LEASES]
    view.tree = path_tree.build(
        path_tree.Holding(r.agent.agent_id, r.path, tuple(sorted(partners.get(r.pk, ()))))
        for r in shown
    )
    view.leases_total, view.leases_shown = len(rows), len(shown)


def _handoffs(views: dict[int, FleetView], ids: list[int]) -> None:
    """Pending handoffs, newest first; a summary the screen flagged stays withheld here too
    (the page refreshes on a wall screen; the admin's handoff page shows it marked)."""
    pending = (
        Handoff.objects.filter(fleet__in=ids, state=Handoff.State.PENDING)
        .select_related("from_agent")
        .order_by("-created_at")
    )
    for h in pending:
        views[h.fleet_id].handoffs.append(
            HandoffRow(
                h.pk,
                h.from_agent.agent_id,
                h.get_status_display(),
                h.for_agents("summary"),
                h.withholds("summary"),
                h.created_at,
            )
        )


def _memory(views: dict[int, FleetView], ids: list[int]) -> None:
    proposed = Q(status=Claim.Status.PROPOSED)
    rows = (
        Claim.objects.filter(fleet__in=ids)
        .values("fleet_id")
        .annotate(
            proposals=Count("pk", filter=proposed),
            oldest_proposal=Min("created_at", filter=proposed),
            promoted=Count("pk", filter=Q(status=Claim.Status.PROMOTED)),
            stale=Count("pk", filter=STALE_Q),
            flagged=Count("pk", filter=screen_view.STATE_Q[screen_view.FLAGGED]),
        )
        .order_by()
    )
    for row in cast("Iterable[dict[str, Any]]", rows):  # values() rows, the fleet popped off
        fleet_id = row.pop("fleet_id")
        views[fleet_id].memory = Memory(**row)


def _charts(views: dict[int, FleetView], ids: list[int], now: datetime) -> None:
    today = timezone.localdate(now)
    days = [today - timedelta(days=DAYS - 1 - i) for i in range(DAYS)]
    since = timezone.make_aware(datetime.combine(days[0], time.min))
    events = _per_day(Activity.objects.filter(fleet__in=ids, at__gte=since), "fleet_id", None)
    claim_events = _per_day(
        ClaimEvent.objects.filter(
            claim__fleet__in=ids,
            at__gte=since,
            kind__in=[ClaimEvent.Kind.PROPOSED, ClaimEvent.Kind.PROMOTED],
        ),
        "claim__fleet_id",
        "kind",
    )
    for fleet_id, view in views.items():
        view.activity = Daily(days, {"events": _fill(days, events, (fleet_id, None))})
        view.claims = Daily(
            days,
            {
                "proposed": _fill(days, claim_events, (fleet_id, ClaimEvent.Kind.PROPOSED)),
                "promoted": _fill(days, claim_events, (fleet_id, ClaimEvent.Kind.PROMOTED)),
            },
        )


def _per_day(
    qs: QuerySet[Any],
    fleet_field: str,
    kind_field: str | None,
) -> dict[tuple[Any, ...], int]:
    """{(fleet id, kind or None, day): count} in one grouped query (days in TIME_ZONE)."""
    fields = [fleet_field, *([kind_field] if kind_field else []), "day"]
    rows = qs.annotate(day=TruncDate("at")).values(*fields).annotate(n=Count("pk")).order_by()
    return {
        (row[fleet_field], row[kind_field] if kind_field else None, row["day"]): row["n"]
        for row in rows
    }


def _fill(
    days: list[date],
    counts: dict[tuple[Any, ...], int],
    key: tuple[Any, Any],
) -> list[int]:
    return [counts.get((*key, day), 0) for day in days]


def _pipeline(view: FleetView) -> None:
    try:
        view.pipeline = pipeline_status.for_fleet(view.fleet)
    except OSError as exc:  # the rest of the page still renders; the panel says why
        view.pipeline_error = f"{type(exc).__name__}: {exc}"
