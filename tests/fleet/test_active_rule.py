"""One rule for "active agent": REST status, the rendered roster and the team page agree."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import api_roster, cache_render, leases
from fleet.models import Agent, Fleet


def _listed(fleet: Fleet) -> tuple[set[str], set[str]]:
    now = timezone.now()
    rest = {a["agent_id"] for a in api_roster.roster(fleet, now=now)["agents"]}
    rendered = {a["agent_id"] for a in cache_render.render_roster(fleet, now=now)["agents"]}
    return rest, rendered


def test_rest_status_and_the_rendered_roster_list_the_same_agents(fleet_a: Fleet) -> None:
    now = timezone.now()
    window = Agent.ACTIVE_WINDOW
    for agent_id, ago in [("recent", window * 0.75), ("edge", window - timedelta(minutes=1)),
                          ("gone", window + timedelta(minutes=1)), ("never", None)]:
        Agent.objects.create(fleet=fleet_a, agent_id=agent_id,
                             last_seen_at=None if ago is None else now - ago)
    rest, rendered = _listed(fleet_a)
    assert rest == rendered == {"recent", "edge"}


def _roster_statements(fleet: Fleet, agents: int) -> list[str]:
    """The roster's statements for a fleet of `agents` active agents, each holding a lease."""
    now = timezone.now()
    made = Agent.objects.bulk_create(
        [Agent(fleet=fleet, agent_id=f"a{i:03d}", last_seen_at=now) for i in range(agents)])
    for agent in made:
        leases.claim_paths(agent, [f"src/{agent.agent_id}/**"])
    with CaptureQueriesContext(connection) as run:
        roster = cache_render.render_roster(fleet, now=timezone.now())
    assert len(roster["agents"]) == agents
    return [q["sql"] for q in run.captured_queries]


def test_the_rendered_roster_asks_the_same_statements_for_3_agents_or_40(
    fleet_a: Fleet, fleet_b: Fleet,
) -> None:
    """The active agents are found by the rule with the holders as a subquery: no
    statement carries a list of the agents' pks, so a roster of 200 agents does not parse
    and bind 200 parameters (it did, twice)."""
    small, large = _roster_statements(fleet_a, 3), _roster_statements(fleet_b, 40)
    assert [sql.count(",") for sql in small] == [sql.count(",") for sql in large]
