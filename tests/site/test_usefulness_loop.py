"""End to end: the usefulness loop through the bridge's own tools, capture, the drain and
the render (docs/usefulness.md).

Real parts: the bridge's tool functions over a rendered cache and its spool, the capture
of a Claude Code-format transcript, the drain, Postgres and the renderer. Session 1 is
served a claim, cites it and ends in success: the claim's tallies say so. Session 2 says
the claim is wrong: a moderator's task appears, the claim's status does not change, its
confidence dips within the rule's bounds, and a moderator's dismissal restores it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from claims import contradictions, moderation, tallies, usefulness
from claims.models import Claim, ClaimFeedback, ClaimUse
from ctxlake_site import workers
from fleet.models import Agent, DeadLetter, Fleet, FleetModerator, Session
from mcp_bridge import tools
from mcp_bridge.capture import run
from mcp_bridge.config import Config
from mcp_bridge.contract import usefulness as rule
from tests.mcp_bridge.transcripts import Claude

TEXT = "The payments tests need STRIPE_API_BASE pointed at the local mock."


def _config(tmp_path: Path, agent: str, session: str) -> Config:
    return Config.from_env({"CTXLAKE_HOME": str(tmp_path / "home"),
                            "CTXLAKE_SPOOL_DIR": str(tmp_path / "spool"),
                            "CTXLAKE_CACHE_DIR": str(tmp_path / "cache"),
                            "CTXLAKE_FLEET_ID": "fleet-a", "CTXLAKE_AGENT_ID": agent,
                            "CTXLAKE_SESSION_ID": session})


def _promoted(fleet: Fleet, ada: Agent, bo: Agent, mod: User, text: str = TEXT) -> Claim:
    FleetModerator.objects.get_or_create(fleet=fleet, user=mod)
    for agent, sid in ((ada, "s-0a"), (bo, "s-0b")):
        Session.objects.get_or_create(fleet=fleet, agent=agent, session_id=sid)
    claim = moderation.propose_claim(
        fleet, text=text, type="gotcha", subject="payments", by_agent=ada,
        evidence=[{"session_id": "s-0a", "message_id": "m-1"},
                  {"session_id": "s-0b", "message_id": "m-1"}]).claim
    return moderation.promote_claim(claim, by=mod)


def _bridge(tmp_path: Path, agent: str, session: str) -> tools.Bridge:
    workers.render_fleet(Fleet.objects.get(slug="fleet-a"))
    return tools.Bridge.from_config(_config(tmp_path, agent, session))


@pytest.fixture
def spooled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _session_one(tmp_path: Path, claim: Claim) -> dict[str, Any]:
    """Search (served), then a transcript that cites the claim, captured at its end."""
    bridge = _bridge(tmp_path, "ada", "sess-1")
    found = bridge.call("memory_search", {"query": "payments tests STRIPE"})
    assert [r["id"] for r in found["results"]] == [claim.public_id]
    bridge.served.flush()
    t = Claude(cwd=str(tmp_path), session="sess-1")
    t.user("Why do the payments tests time out?")
    t.tool("mcp__ctxlake__memory_search", {"query": "payments tests STRIPE"},
           f'{{"results": [{{"id": "{claim.public_id}"}}]}}')
    t.assistant(f"Per {claim.public_id} I point STRIPE_API_BASE at the mock; tests pass now.")
    path = t.write(tmp_path / "sess-1.jsonl")
    return run.capture(_config(tmp_path, "ada", "sess-1"), path=str(path), session="sess-1",
                       reason="prompt_input_exit", outcome="success")


def test_a_served_and_cited_claim_is_tallied_with_its_session_outcome(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, spooled: Path,
) -> None:
    claim = _promoted(fleet_a, ada, bo, mod)
    before = Claim.objects.get(pk=claim.pk).confidence
    assert before == rule.confidence(rule.Record(evidence_sessions=2))  # new: not punished
    _session_one(spooled, claim)
    workers.drain_spool("fleet-a")
    assert not DeadLetter.objects.exists()

    claim.refresh_from_db()
    assert (claim.served_sessions, claim.used_sessions, claim.used_succeeded,
            claim.used_failed) == (1, 1, 1, 0)
    use = ClaimUse.objects.get(claim=claim)
    assert (use.session.session_id, use.used, use.via) == ("sess-1", True, ["search"])
    assert claim.confidence >= before  # a success never lowers it
    assert usefulness.claims_by_id(fleet_a, [claim.public_id])  # sanity: the id resolves

    # the next render says why, to agents, in the attribution
    bridge = _bridge(spooled, "bo", "sess-9")
    hit = bridge.call("memory_search", {"query": "payments tests STRIPE"})["results"][0]
    assert hit["why"] == "used in 1 session, which succeeded"
    assert "(used in 1 session, which succeeded)" in hit["attribution"]

    # and memory_timeline names the session and its outcome for every entry
    entries = bridge.call("memory_timeline", {"subject": "payments"})["entries"]
    proposed = next(e for e in entries if e["kind"] == "proposed")
    assert proposed["session_id"] == "s-0a"
    assert all("outcome" in e for e in entries)


def test_feedback_is_a_task_that_changes_nothing_until_a_person_acts(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, spooled: Path,
) -> None:
    claim = _promoted(fleet_a, ada, bo, mod)
    before = Claim.objects.get(pk=claim.pk)
    bridge = _bridge(spooled, "bo", "sess-2")
    out = bridge.call("memory_feedback", {"claim": claim.public_id, "verdict": "wrong",
                                          "note": "The mock moved: STRIPE_MOCK_URL now."})
    assert "moderator" in out["message"]
    workers.drain_spool("fleet-a")

    fb = ClaimFeedback.objects.get(claim=claim)
    assert (fb.agent, fb.session.session_id if fb.session else None, fb.verdict,
            fb.resolution) == (bo, "sess-2", "wrong", "")
    after = Claim.objects.get(pk=claim.pk)
    assert (after.status, after.contested, after.text) == (
        before.status, before.contested, before.text)
    assert after.open_flags == 1
    flagged = rule.confidence(replace(tallies.record(before), flags=1),
                              tallies.fleet_base_rate(after.fleet_id))
    assert after.confidence == flagged < before.confidence

    usefulness.resolve_feedback(fb, by=mod, resolution="dismissed", note="still right")
    assert Claim.objects.get(pk=claim.pk).confidence == before.confidence
    with pytest.raises(usefulness.AlreadyResolved):
        usefulness.resolve_feedback(fb, by=mod, resolution="acted")


@pytest.mark.parametrize(("arguments", "says"), [
    ({"claim": "cc-999", "verdict": "wrong", "note": "x"}, "not among this fleet's"),
    ({"claim": "cc-01; DROP", "verdict": "wrong", "note": "x"}, "claim id"),
    ({"claim": "cc-01", "verdict": "meh", "note": "x"}, "verdict must be one of"),
    ({"claim": "cc-01", "verdict": "wrong", "note": "a\x00b"}, "NUL"),
    ({"claim": "cc-01", "verdict": "wrong", "note": "x" * 5000}, "limit is 1000"),
    ({"claim": "cc-01", "verdict": "wrong", "note": "\ud800"}, "surrogate"),
    ({"claim": "cc-01", "verdict": "outdated"}, "note is required"),
])
def test_hostile_feedback_is_refused_and_nothing_is_stored(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, spooled: Path,
    arguments: dict[str, Any], says: str,
) -> None:
    _promoted(fleet_a, ada, bo, mod)
    bridge = _bridge(spooled, "bo", "sess-3")
    with pytest.raises(tools.Rejected, match=says):
        bridge.call("memory_feedback", arguments)
    workers.drain_spool("fleet-a")
    assert not ClaimFeedback.objects.exists() and not DeadLetter.objects.exists()


def test_rest_feedback_lands_as_the_same_task_and_other_fleets_claims_are_absent(
    fleet_a: Fleet, fleet_b: Fleet, ada: Agent, bo: Agent, cy: Agent, mod: User,
    api_as: Any,
) -> None:
    claim = _promoted(fleet_a, ada, bo, mod)
    url = f"/api/v1/fleets/fleet-a/claims/{claim.public_id}/feedback"
    ok = api_as(bo).post(url, {"verdict": "outdated", "note": "renamed in v2"}, format="json")
    assert ok.status_code == 201, ok.content
    assert ClaimFeedback.objects.get().verdict == "outdated"
    # another fleet's agent: the claim is not there for it
    theirs = api_as(cy).post(url.replace("fleet-a", "fleet-b"),
                             {"verdict": "wrong", "note": "x"}, format="json")
    assert theirs.status_code == 404
    for body in ({"verdict": "nope"}, {"verdict": "wrong", "note": "\x00"},
                 {"verdict": "wrong", "note": "n" * 1001}, {"verdict": "wrong"}):
        bad = api_as(bo).post(url, body, format="json")
        assert bad.status_code == 400, (body, bad.content)
    assert ClaimFeedback.objects.count() == 1


def test_contradicting_promoted_claims_are_marked_until_a_person_resolves_them(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, spooled: Path,
) -> None:
    from claims import tasks

    first = _promoted(fleet_a, ada, bo, mod, "The integration tests need NC_R1_MOCK=1 set.")
    second = moderation.propose_claim(
        fleet_a, text="The integration tests do not need NC_R1_MOCK=1 set.", type="gotcha",
        subject="payments", by_agent=bo,
        evidence=[{"session_id": "s-0a", "message_id": "m-2"},
                  {"session_id": "s-0b", "message_id": "m-2"}]).claim
    tasks.embed_pending()
    moderation.promote_claim(second, by=mod)
    assert contradictions.open_by_claim(fleet_a) == {
        first.pk: [second.public_id], second.pk: [first.public_id]}

    bridge = _bridge(spooled, "bo", "sess-4")
    hits = bridge.call("memory_search", {"query": "integration tests NC_R1_MOCK"})["results"]
    marks = {h["id"]: h["attribution"] for h in hits}
    assert f"CONFLICTS WITH {second.public_id}" in marks[first.public_id]
    assert f"CONFLICTS WITH {first.public_id}" in marks[second.public_id]

    (pair,) = contradictions.open_pairs(fleet_a)
    contradictions.dismiss(pair, by=mod, note="different suites")
    assert contradictions.open_by_claim(fleet_a) == {}
    assert contradictions.scan_fleet(fleet_a) == 0  # a dismissed pair is not found again


def test_a_moderator_sets_confidence_audited_and_a_proposer_cannot(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, api_as: Any,
) -> None:
    from claims.models import ClaimEvent

    claim = _promoted(fleet_a, ada, bo, mod)
    derived = claim.confidence
    usefulness.set_confidence(claim, by=mod, value=0.3, note="seen it fail")
    assert Claim.objects.get(pk=claim.pk).confidence == 0.3
    event = ClaimEvent.objects.filter(claim=claim, kind="confidence").get()
    assert (event.actor_user, event.data) == (mod, {"before": derived, "after": 0.3, "set": 0.3})
    usefulness.set_confidence(claim, by=mod, value=None)
    assert Claim.objects.get(pk=claim.pk).confidence == derived
    with pytest.raises(ValueError):
        usefulness.set_confidence(claim, by=mod, value=1.5)
    with pytest.raises(moderation.GateRefused):
        usefulness.set_confidence(claim, by=User.objects.create_user("nobody"), value=0.9)

    said = api_as(ada).post("/api/v1/fleets/fleet-a/claims", {
        "text": "x is y", "type": "fact", "subject": "x", "confidence": 1.0,
        "evidence": [{"session_id": "s-0a", "message_id": "m-9"}]}, format="json")
    assert said.status_code == 400 and b"confidence" in said.content


def test_the_briefing_names_what_marked_a_claim_stale(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, spooled: Path,
) -> None:
    claim = _promoted(fleet_a, ada, bo, mod)
    Claim.objects.filter(pk=claim.pk).update(staleness=0.5, stale_since="bo changed src/pay.py")
    hit = _bridge(spooled, "bo", "sess-5").call(
        "memory_search", {"query": "payments tests STRIPE"})["results"][0]
    assert "POSSIBLY STALE since bo changed src/pay.py" in hit["attribution"]
