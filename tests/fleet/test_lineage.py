"""Independent sessions count only sessions the fleet has seen from its own agents."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import handoffs
from fleet.lineage import independent_sessions, verified_sessions
from fleet.models import Agent, Fleet, Session
from fleet.sessions import note_sessions_seen


def _seen(fleet: Fleet, agent: Agent, *ids: str) -> None:
    now = timezone.now()
    note_sessions_seen(fleet, {i: (agent, now, now) for i in ids})


def _chain(fleet: Fleet, agent: Agent, ids: list[str]) -> None:
    """Sessions ids[0] → ids[1] → … joined by picked-up handoffs."""
    sessions = [
        Session.objects.get_or_create(fleet=fleet, agent=agent, session_id=i)[0] for i in ids
    ]
    for src, dst in zip(sessions, sessions[1:], strict=False):
        h = handoffs.create_handoff(agent, summary="go on", session=src, source_trust="operator")
        handoffs.pick_up_handoff(h, by=agent, expected_version=1, session=dst)


def test_it_counts_unlinked_seen_sessions_separately(fleet_a: Fleet, ada: Agent) -> None:
    _seen(fleet_a, ada, "s1", "s2", "s3")
    assert independent_sessions(fleet_a, ["s1", "s2", "s3"]) == 3


def test_sessions_the_fleet_never_saw_are_not_counted(fleet_a: Fleet, ada: Agent) -> None:
    _seen(fleet_a, ada, "s1")
    assert independent_sessions(fleet_a, ["s1", "invented-1", "invented-2"]) == 1
    assert verified_sessions(fleet_a, ["s1", "invented-1"]) == {"s1"}
    assert independent_sessions(fleet_a, ["invented-1", "invented-2"]) == 0


def test_another_fleets_session_is_not_counted(
    fleet_a: Fleet, fleet_b: Fleet, ada: Agent, cy: Agent
) -> None:
    _seen(fleet_b, cy, "b-session")
    _seen(fleet_a, ada, "a-session")
    assert independent_sessions(fleet_a, ["a-session", "b-session"]) == 1
    assert independent_sessions(fleet_b, ["a-session", "b-session"]) == 1


def test_it_counts_a_handoff_chain_once_even_through_sessions_not_cited(
    fleet_a: Fleet, ada: Agent
) -> None:
    _chain(fleet_a, ada, ["s1", "s2", "s3"])
    _seen(fleet_a, ada, "other")
    assert independent_sessions(fleet_a, ["s1", "s3"]) == 1
    assert independent_sessions(fleet_a, ["s1", "s3", "other"]) == 2


def test_it_ignores_handoffs_that_were_never_picked_up(fleet_a: Fleet, ada: Agent) -> None:
    s1 = Session.objects.create(fleet=fleet_a, agent=ada, session_id="s1")
    handoffs.create_handoff(ada, summary="left", session=s1)
    _seen(fleet_a, ada, "s2")
    assert independent_sessions(fleet_a, ["s1", "s2"]) == 2


def test_it_ignores_other_fleets_chains(
    fleet_a: Fleet, fleet_b: Fleet, ada: Agent, cy: Agent
) -> None:
    _chain(fleet_b, cy, ["s1", "s2"])
    _seen(fleet_a, ada, "s1", "s2")
    assert independent_sessions(fleet_a, ["s1", "s2"]) == 2


def test_it_ignores_blank_and_repeated_ids(fleet_a: Fleet, ada: Agent) -> None:
    _seen(fleet_a, ada, "s1")
    assert independent_sessions(fleet_a, ["", "s1", "s1"]) == 1
    assert independent_sessions(fleet_a, []) == 0


def test_noting_sessions_widens_their_window_and_keeps_their_owner(
    fleet_a: Fleet, ada: Agent, bo: Agent
) -> None:
    t0 = timezone.now() - timedelta(hours=1)
    note_sessions_seen(fleet_a, {"s1": (ada, t0, t0 + timedelta(minutes=5))})
    note_sessions_seen(fleet_a, {"s1": (ada, t0 - timedelta(minutes=1), t0 + timedelta(minutes=9))})
    note_sessions_seen(fleet_a, {"s1": (ada, t0 + timedelta(minutes=2), t0 + timedelta(minutes=3))})
    rows = note_sessions_seen(fleet_a, {"s1": (bo, t0, t0 + timedelta(hours=2))})
    s1 = Session.objects.get(fleet=fleet_a, session_id="s1")
    assert s1.agent == ada and rows["s1"].agent == ada  # bo cannot take ada's session
    assert s1.first_seen_at == t0 - timedelta(minutes=1)
    assert s1.last_seen_at == t0 + timedelta(minutes=9)


def test_an_agent_of_another_fleet_is_refused(fleet_a: Fleet, cy: Agent) -> None:
    now = timezone.now()
    with pytest.raises(ValueError):
        note_sessions_seen(fleet_a, {"s1": (cy, now, now)})
    assert not Session.objects.filter(session_id="s1").exists()


def test_a_batch_of_known_sessions_is_noted_in_three_statements(
    fleet_a: Fleet, ada: Agent, bo: Agent
) -> None:
    t0 = timezone.now() - timedelta(hours=1)
    minute = timedelta(minutes=1)
    note_sessions_seen(fleet_a, {f"s{i}": (ada, t0, t0 + minute) for i in range(50)})
    later = {f"s{i}": (ada, t0 + (i - 25) * minute, t0 + i * minute) for i in range(50)}
    later["theirs"] = (bo, t0, t0)
    with CaptureQueriesContext(connection) as queries:
        note_sessions_seen(fleet_a, later)
    assert len(queries) == 3  # insert the new, read them all, widen the known
    rows = {s.session_id: s for s in Session.objects.filter(fleet=fleet_a)}
    for i in range(50):  # first only ever moves back, last only forward
        assert rows[f"s{i}"].first_seen_at == min(t0, t0 + (i - 25) * minute)
        assert rows[f"s{i}"].last_seen_at == max(t0 + minute, t0 + i * minute)
    assert rows["theirs"].agent == bo
