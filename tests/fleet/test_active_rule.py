"""One rule for "active agent": REST status, the rendered roster and the team page agree."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fleet import api_roster, cache_render
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
