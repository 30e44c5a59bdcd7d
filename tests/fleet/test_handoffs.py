from __future__ import annotations

import pytest

from fleet import handoffs
from fleet.models import Agent, Handoff, Session


def _handoff(agent: Agent, trust: str = "agent") -> Handoff:
    return handoffs.create_handoff(agent, summary="half done", source_trust=trust)


def test_it_returns_a_conflict_for_a_stale_version_instead_of_overwriting(ada: Agent) -> None:
    handoff = _handoff(ada)
    assert isinstance(handoffs.update_handoff(handoff, expected_version=1, summary="v2"), Handoff)
    stale = handoffs.update_handoff(handoff, expected_version=1, summary="clobber")
    assert stale == handoffs.Conflict(handoff.pk, expected_version=1, current_version=2)
    handoff.refresh_from_db()
    assert (handoff.summary, handoff.version) == ("v2", 2)


def test_it_asks_for_confirmation_before_picking_up_an_agent_written_handoff(
    ada: Agent, bo: Agent
) -> None:
    handoff = _handoff(ada, trust="agent")
    result = handoffs.pick_up_handoff(handoff, by=bo, expected_version=1)
    assert isinstance(result, handoffs.NeedsConfirmation)
    handoff.refresh_from_db()
    assert handoff.state == "pending"
    done = handoffs.pick_up_handoff(handoff, by=bo, expected_version=1, confirm=True)
    assert isinstance(done, Handoff)
    assert (done.state, done.picked_up_by, done.version) == ("picked_up", bo, 2)


def test_it_picks_up_an_operator_handoff_in_one_call(ada: Agent, bo: Agent) -> None:
    handoff = _handoff(ada, trust="operator")
    assert isinstance(handoffs.pick_up_handoff(handoff, by=bo, expected_version=1), Handoff)


def test_only_one_of_two_racing_pickups_wins(ada: Agent, bo: Agent) -> None:
    handoff = _handoff(ada, trust="operator")
    copy = Handoff.objects.get(pk=handoff.pk)
    first = handoffs.pick_up_handoff(handoff, by=bo, expected_version=1)
    second = handoffs.pick_up_handoff(copy, by=ada, expected_version=1)
    assert isinstance(first, Handoff)
    assert isinstance(second, handoffs.Conflict)


def test_it_refuses_to_pick_up_a_cleared_handoff(ada: Agent, bo: Agent) -> None:
    handoff = _handoff(ada, trust="operator")
    cleared = handoffs.clear_handoff(handoff, expected_version=1, by=ada)
    assert isinstance(cleared, Handoff)
    with pytest.raises(handoffs.NotPending):
        handoffs.pick_up_handoff(cleared, by=bo, expected_version=cleared.version)


def test_it_links_the_sessions_of_a_pickup(ada: Agent, bo: Agent) -> None:
    s1 = Session.objects.create(fleet=ada.fleet, agent=ada, session_id="s1")
    s2 = Session.objects.create(fleet=ada.fleet, agent=bo, session_id="s2")
    handoff = handoffs.create_handoff(ada, summary="x", session=s1, source_trust="operator")
    done = handoffs.pick_up_handoff(handoff, by=bo, expected_version=1, session=s2)
    assert isinstance(done, Handoff)
    assert (done.from_session, done.picked_up_session) == (s1, s2)


def _row(handoff: Handoff) -> dict[str, object]:
    return {f.attname: getattr(handoff, f.attname) for f in Handoff._meta.concrete_fields}


def test_the_handoff_returned_is_the_row_as_written(ada: Agent, bo: Agent) -> None:
    """update_handoff sets the changes on the copy read at the expected version instead of
    reading the row back: the copy must equal the row, field for field."""
    handoff = _handoff(ada)
    edited = handoffs.update_handoff(handoff, expected_version=1, summary="v2")
    assert isinstance(edited, Handoff)
    assert _row(edited) == _row(Handoff.objects.get(pk=handoff.pk))
    taken = handoffs.pick_up_handoff(edited, by=bo, expected_version=2, confirm=True)
    assert isinstance(taken, Handoff) and taken.picked_up_by == bo
    assert _row(taken) == _row(Handoff.objects.get(pk=handoff.pk))
    cleared = handoffs.clear_handoff(taken, expected_version=3, by=bo)
    assert isinstance(cleared, Handoff)
    assert _row(cleared) == _row(Handoff.objects.get(pk=handoff.pk))


def test_a_copy_read_before_another_change_is_read_again(ada: Agent) -> None:
    """A copy older than the version it names (changed in between, then named at the new
    version) is not patched but re-read: the row's other changes come back too."""
    handoff = _handoff(ada)
    old_copy = Handoff.objects.get(pk=handoff.pk)
    assert isinstance(handoffs.update_handoff(handoff, expected_version=1, summary="v2"),
                      Handoff)
    cleared = handoffs.update_handoff(old_copy, expected_version=2, state="cleared")
    assert isinstance(cleared, Handoff)
    assert (cleared.summary, cleared.state, cleared.version) == ("v2", "cleared", 3)
    assert _row(cleared) == _row(Handoff.objects.get(pk=handoff.pk))


def test_every_write_moves_the_version_on_so_no_stale_copy_is_patched(ada: Agent) -> None:
    """Writes other than the swap (a text release's update, an admin save of the version it
    loaded, a deleted session's SET_NULL) move `version` too: a copy read before them can't
    win the swap and be answered with their change missing."""
    session = Session.objects.create(fleet=ada.fleet, agent=ada, session_id="s1")
    handoff = handoffs.create_handoff(ada, summary="x", session=session)
    copy = Handoff.objects.get(pk=handoff.pk)

    def version() -> int:
        return Handoff.objects.values_list("version", flat=True).get(pk=handoff.pk)

    copy.save()  # what the admin change form does: the version it loaded, 1
    assert version() == 2
    Handoff.objects.filter(pk=handoff.pk).update(screen_released_at=handoff.created_at)
    assert version() == 3
    session.delete()
    assert version() == 4
    assert handoffs.update_handoff(copy, expected_version=1, state="cleared") == \
        handoffs.Conflict(handoff.pk, expected_version=1, current_version=4)
    won = handoffs.update_handoff(copy, expected_version=4, state="cleared")
    assert isinstance(won, Handoff)
    assert _row(won) == _row(Handoff.objects.get(pk=handoff.pk))
    assert (won.version, won.from_session_id, won.screen_released_at) == (
        5, None, handoff.created_at)
