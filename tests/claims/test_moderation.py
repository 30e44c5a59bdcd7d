"""The promotion gate and the other writers of claim state."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from claims import moderation
from claims.models import Claim
from fleet import handoffs
from fleet.models import Agent, Fleet, FleetModerator, Session
from tests.claims.witness import seen_cited

CITE = [{"session_id": "s1", "message_id": "m1", "path": "src/a.py"}]


def _propose(fleet: Fleet, agent: Agent | None = None, **kw: Any) -> Claim:
    args = {
        "text": "pytest -x stops at the first failure",
        "type": "fact",
        "subject": "pytest",
        "evidence": CITE,
        **kw,
    }
    seen_cited(fleet, args["evidence"])
    return moderation.propose_claim(fleet, by_agent=agent, **args).claim


@pytest.fixture
def fleet_mod(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


def test_it_files_a_proposal_in_agent_scope_with_evidence_and_an_event(
    fleet_a: Fleet, ada: Agent
) -> None:
    claim = _propose(fleet_a, ada)
    assert (claim.status, claim.scope, claim.independent_sessions) == ("proposed", "agent", 1)
    assert list(claim.events.values_list("kind", flat=True)) == ["proposed"]
    assert claim.evidence.get().agent == ada


def test_an_exact_duplicate_from_a_seen_session_corroborates_as_a_marked_event(
    fleet_a: Fleet, ada: Agent
) -> None:
    """Issue 13: the one automatic corroboration (same text, a verified other session)."""
    first = _propose(fleet_a, ada)
    seen_cited(fleet_a, [{"session_id": "s2"}], agent=ada)
    again = moderation.propose_claim(
        fleet_a,
        text="  PYTEST -x stops at the first   failure",
        type="fact",
        subject="pytest",
        evidence=[{"session_id": "s2", "message_id": "m9"}],
        by_agent=ada,
    )
    assert (again.claim.pk, again.created, again.evidence_added) == (first.pk, False, 1)
    assert Claim.objects.count() == 1
    first.refresh_from_db()
    assert first.independent_sessions == 2
    assert list(first.events.values_list("kind", flat=True)) == ["proposed", "corroborated"]
    event = first.events.get(kind="corroborated")
    assert event.data["automatic"] is True and "s2" in event.note


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        ([], "No evidence"),
        ([{"session_id": "", "message_id": "m"}], "session_id must not be empty"),
        ([{"session_id": "s", "message_id": "  "}], "message_id must not be empty"),
        ([{"session_id": "s", "message_id": "m", "url": "x"}], "unknown keys"),
        ([{"session_id": "s", "message_id": str(i)} for i in range(21)], "At most 20"),
        (["not an object"], "must be an object"),
    ],
)
def test_it_refuses_bad_evidence_and_writes_nothing(
    fleet_a: Fleet, evidence: list[Any], message: str
) -> None:
    with pytest.raises(moderation.InvalidProposal, match=message):
        _propose(fleet_a, evidence=evidence)
    assert not Claim.objects.exists()


def test_it_scrubs_secrets_before_they_reach_the_database(fleet_a: Fleet) -> None:
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    claim = _propose(
        fleet_a,
        text=f"deploy uses {key}",
        evidence=[{"session_id": "s", "message_id": "m", "excerpt": f"key={key}"}],
    )
    assert key not in claim.text and "[REDACTED:" in claim.text
    assert key not in claim.evidence.get().excerpt


def test_the_gate_promotes_for_a_granted_moderator(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod, note="checked")
    assert (claim.status, claim.scope, claim.promoted_by) == ("promoted", "fleet", fleet_mod)
    assert claim.events.last().actor_user == fleet_mod


def test_the_gate_refuses_without_the_permission(fleet_a: Fleet) -> None:
    staff = User.objects.create_user("staff", is_staff=True)
    FleetModerator.objects.create(fleet=fleet_a, user=staff)
    with pytest.raises(moderation.GateRefused, match="may not moderate"):
        moderation.promote_claim(_propose(fleet_a), by=staff)


def test_the_gate_refuses_a_moderator_of_another_fleet(
    fleet_a: Fleet, fleet_b: Fleet, mod: User
) -> None:
    FleetModerator.objects.create(fleet=fleet_b, user=mod)
    claim = _propose(fleet_a)
    with pytest.raises(moderation.GateRefused):
        moderation.promote_claim(claim, by=mod)
    claim.refresh_from_db()
    assert claim.status == "proposed"


def test_the_gate_refuses_an_agent(fleet_a: Fleet, ada: Agent) -> None:
    with pytest.raises(moderation.GateRefused):
        moderation.promote_claim(_propose(fleet_a), by=ada)


def test_the_gate_refuses_too_few_independent_sessions_across_a_handoff_chain(
    fleet_a: Fleet, ada: Agent, fleet_mod: User
) -> None:
    fleet_a.min_independent_sessions = 2
    fleet_a.save()
    s1 = Session.objects.create(fleet=fleet_a, agent=ada, session_id="s1")
    s2 = Session.objects.create(fleet=fleet_a, agent=ada, session_id="s2")
    h = handoffs.create_handoff(ada, summary="go on", session=s1, source_trust="operator")
    handoffs.pick_up_handoff(h, by=ada, expected_version=1, session=s2)
    claim = _propose(
        fleet_a,
        evidence=[{"session_id": "s1", "message_id": "m"}, {"session_id": "s2", "message_id": "m"}],
    )
    assert claim.independent_sessions == 1
    with pytest.raises(moderation.GateRefused, match="1 independent session"):
        moderation.promote_claim(claim, by=fleet_mod)


def test_the_gate_refuses_a_secret_that_slipped_into_the_record(
    fleet_a: Fleet, fleet_mod: User
) -> None:
    claim = _propose(fleet_a)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    claim.evidence.update(excerpt=f"token {token}")  # e.g. written by an older version
    with pytest.raises(moderation.GateRefused, match="secret"):
        moderation.promote_claim(claim, by=fleet_mod)


def test_the_second_of_two_promotions_is_told_it_lost(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    stale_copy = Claim.objects.get(pk=claim.pk)
    moderation.promote_claim(claim, by=fleet_mod)
    with pytest.raises(moderation.AlreadyDecided, match="already promoted"):
        moderation.promote_claim(stale_copy, by=fleet_mod)
    assert claim.events.filter(kind="promoted").count() == 1


def test_a_retracted_claim_cannot_be_promoted(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = moderation.retract_claim(_propose(fleet_a), by=fleet_mod, note="wrong")
    with pytest.raises(moderation.GateRefused, match="retracted"):
        moderation.promote_claim(claim, by=fleet_mod)


def test_rejecting_needs_a_reason(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    with pytest.raises(moderation.GateRefused, match="reason"):
        moderation.reject_claim(claim, by=fleet_mod, reason="  ")
    assert moderation.reject_claim(claim, by=fleet_mod, reason="duplicate").status == "rejected"


def test_contest_flags_and_keeps_status(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    claim = moderation.contest_claim(claim, by=fleet_mod, note="flaky on CI")
    assert (claim.status, claim.contested) == ("promoted", True)


def test_sending_back_takes_a_promoted_claim_back_to_the_gate(fleet_a: Fleet,
                                                             fleet_mod: User) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    with pytest.raises(moderation.GateRefused, match="note"):
        moderation.send_back_claim(claim, by=fleet_mod, note=" ")
    claim = moderation.send_back_claim(claim, by=fleet_mod, note="used in 9 failed sessions")
    assert (claim.status, claim.promoted_at, claim.promoted_by) == ("proposed", None, None)
    assert claim.events.filter(kind="sent_back", note="used in 9 failed sessions").count() == 1
    with pytest.raises(moderation.AlreadyDecided, match="already proposed"):
        moderation.send_back_claim(claim, by=fleet_mod, note="twice")
    assert moderation.promote_claim(claim, by=fleet_mod).status == "promoted"  # the gate again


def test_only_a_moderator_of_the_fleet_sends_back(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    outsider = User.objects.create_user("outsider", password="x-pass-1234", is_staff=True)
    with pytest.raises(moderation.GateRefused, match="may not moderate"):
        moderation.send_back_claim(claim, by=outsider, note="no")
    claim.refresh_from_db()
    assert claim.status == "promoted"


def test_editing_keeps_the_original_text_in_the_event(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    original = claim.text
    claim = moderation.edit_claim(claim, by=fleet_mod, text="pytest -x stops after one failure")
    assert claim.text == "pytest -x stops after one failure"
    assert claim.events.get(kind="edited").data["original"] == original


def test_merging_moves_evidence_and_closes_the_proposal(fleet_a: Fleet, fleet_mod: User) -> None:
    target = _propose(fleet_a)
    dup = _propose(
        fleet_a,
        text="pytest's -x flag halts on first failure",
        evidence=[{"session_id": "s7", "message_id": "m7"}],
    )
    moderation.merge_claim(dup, into=target, by=fleet_mod)
    dup.refresh_from_db()
    target.refresh_from_db()
    assert dup.status == "rejected" and target.independent_sessions == 2
    assert target.evidence.filter(session_id="s7").exists()


def test_no_code_outside_moderation_writes_claim_status() -> None:
    """Static guard: outside claims/moderation.py, nothing assigns `.status` or passes
    `status=` to a create/update call in the claims app or the site (fleet never sees claims)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    writers = {"create", "update", "update_or_create", "get_or_create", "bulk_update"}
    offenders = []
    for path in [*(root / "claims").rglob("*.py"), *(root / "ctxlake_site").rglob("*.py")]:
        if "migrations" in path.parts or path.name == "moderation.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            assigns = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "status" for t in node.targets
            )
            calls = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in writers
                and any(k.arg == "status" for k in node.keywords)
            )
            if assigns or calls:
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
