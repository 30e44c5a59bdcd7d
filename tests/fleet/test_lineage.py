from __future__ import annotations

from fleet import handoffs
from fleet.lineage import independent_sessions
from fleet.models import Agent, Fleet, Session


def _chain(fleet: Fleet, agent: Agent, ids: list[str]) -> None:
    """Sessions ids[0] → ids[1] → … joined by picked-up handoffs."""
    sessions = [
        Session.objects.get_or_create(fleet=fleet, agent=agent, session_id=i)[0] for i in ids
    ]
    for src, dst in zip(sessions, sessions[1:], strict=False):
        h = handoffs.create_handoff(agent, summary="go on", session=src, source_trust="operator")
        handoffs.pick_up_handoff(h, by=agent, expected_version=1, session=dst)


def test_it_counts_unlinked_sessions_separately(fleet_a: Fleet) -> None:
    assert independent_sessions(fleet_a, ["s1", "s2", "s3"]) == 3


def test_it_counts_a_handoff_chain_once_even_through_sessions_not_cited(
    fleet_a: Fleet, ada: Agent
) -> None:
    _chain(fleet_a, ada, ["s1", "s2", "s3"])
    assert independent_sessions(fleet_a, ["s1", "s3"]) == 1
    assert independent_sessions(fleet_a, ["s1", "s3", "other"]) == 2


def test_it_ignores_handoffs_that_were_never_picked_up(fleet_a: Fleet, ada: Agent) -> None:
    s1 = Session.objects.create(fleet=fleet_a, agent=ada, session_id="s1")
    handoffs.create_handoff(ada, summary="left", session=s1)
    assert independent_sessions(fleet_a, ["s1", "s2"]) == 2


def test_it_ignores_other_fleets_chains(fleet_a: Fleet, fleet_b: Fleet, cy: Agent) -> None:
    _chain(fleet_b, cy, ["s1", "s2"])
    assert independent_sessions(fleet_a, ["s1", "s2"]) == 2


def test_it_ignores_blank_and_repeated_ids(fleet_a: Fleet) -> None:
    assert independent_sessions(fleet_a, ["", "s1", "s1"]) == 1
    assert independent_sessions(fleet_a, []) == 0
