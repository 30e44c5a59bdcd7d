"""Issue 24's end to end, through the real Claude Code CLI and the real server.

A fleet has one promoted claim (two sessions' evidence, a moderator's promotion), rendered
into the cache the bridge reads. Session 1 (the real CLI against the Messages-API
stand-in): `memory_search` shows it the claim (the bridge's served record), the model
writes the file the claim names, the config test passes and the answer cites the claim.
The real SessionEnd hook's capture spools session.end with `used` and the outcome it read
from the transcript (the last check passed: success). The real drain tallies it: the
claim's review page shows served 1, used 1, 1 succeeded. Session 2 (bo, the real CLI
again) calls `memory_feedback … wrong`: the drain makes it a ClaimFeedback row, an open
task on the review page, and the claim's status, text and contested mark stay as they
were until a moderator acts (here: dismisses it on the page).

Only the model is a stand-in.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from html import escape
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from claims import moderation, tallies
from claims.models import Claim, ClaimFeedback, ClaimUse
from ctxlake_site import workers
from fleet.models import Agent, DeadLetter, FleetModerator, Session
from fleet.models import Fleet as FleetRow
from mcp_bridge.contract import usefulness as rule
from tests.capture_log import wait_until_finished
from tests.realclients.claude_session import drive
from tests.realclients.conftest import AGENT, FLEET, HOLDER, Clients, Fleet
from tests.realclients.messages_standin import Say, Step, ToolUse
from tests.realclients.scenario import CHECK, checkout

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SEARCH, FEEDBACK = "mcp__ctxlake__memory_search", "mcp__ctxlake__memory_feedback"
TEXT = ("The config tests read `FOO=1` from fixtures.env, so a fresh checkout needs that "
        "file before they run.")
PROMPT_1 = "The config unit test fails on a fresh checkout; please fix it."
QUERY = "config tests fixtures.env fresh checkout"
PROMPT_2 = "Check whether the fleet's note on the config tests still holds."
NOTE = "fixtures.env moved to tests/fixtures.env in the new layout; the note is wrong now."
FINAL_2 = "standin: told the moderators"
WAIT_SECS = 60  # a deadline for a hang; every wait below returns as soon as its line is there


def wait_for_line(world: Fleet, kind: str, session: str, **payload: Any) -> dict[str, Any]:
    """The first spooled `kind` line of `session` whose payload has these items; waits for
    it (the capture runs detached after the CLI exits; served lines come from a thread)."""
    deadline = time.monotonic() + WAIT_SECS
    while True:
        for e in world.events():
            if (e["kind"] == kind and e.get("session") == session
                    and all(e["payload"].get(k) == v for k, v in payload.items())):
                return e
        assert time.monotonic() < deadline, (
            f"no {kind} {payload} for {session} within {WAIT_SECS} s\n{world.what_happened()}")
        time.sleep(0.1)


def session_ended(world: Fleet, session: str) -> dict[str, Any]:
    end = wait_for_line(world, "session.end", session)
    # a PreCompact run, if any, may finish after the end's: wait for every run to say so
    wait_until_finished(world.ctx_home, session=session, context=world.what_happened)
    return end


@pytest.fixture
def world(server_world: Fleet) -> Fleet:
    """The server and the client on one machine; the project is a git checkout whose config
    test needs fixtures.env."""
    checkout(server_world.project)
    return server_world


def promoted_claim(moderator: User) -> Claim:
    """One claim with evidence from two sessions the fleet has seen, promoted by a person."""
    fleet = FleetRow.objects.create(slug=FLEET, name="Real clients", memory_mode="live")
    FleetModerator.objects.create(fleet=fleet, user=moderator)
    ada = Agent.objects.create(fleet=fleet, agent_id=AGENT, runtime="claude-code")
    bo = Agent.objects.create(fleet=fleet, agent_id=HOLDER, runtime="claude-code")
    for agent, sid in ((ada, "s-0a"), (bo, "s-0b")):
        Session.objects.create(fleet=fleet, agent=agent, session_id=sid)
    claim = moderation.propose_claim(
        fleet, text=TEXT, type="gotcha", subject="fixtures.env", by_agent=ada,
        evidence=[{"session_id": "s-0a", "message_id": "m-1"},
                  {"session_id": "s-0b", "message_id": "m-1"}]).claim
    claim = moderation.promote_claim(claim, by=moderator)
    assert claim.status == Claim.Status.PROMOTED
    assert workers.render_fleet(fleet).claims == 1
    return claim


def review_page(browser: Client, claim: Claim) -> str:
    page = browser.get(reverse("admin:claims_claim_change", args=(claim.pk,)))
    assert page.status_code == 200
    return page.content.decode()


def cell(page: str, element_id: str) -> str:
    """The text of the element with this id, tags dropped, whitespace collapsed."""
    found = re.search(rf'<(\w+)[^>]*\bid="{element_id}"[^>]*>(.*?)</\1>', page, re.S)
    assert found, f"no #{element_id} on the page"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(2)).split())


def test_a_served_and_cited_claim_is_tallied_and_feedback_waits_for_a_person(
    clients: Clients, world: Fleet, moderator: User,
) -> None:
    claim = promoted_claim(moderator)
    cid = claim.public_id
    world.install("claude-code")

    # -- session 1: search (served), act on the claim, the test passes, cite it ------------
    final_1 = f"Per {cid}, the config tests read FOO=1 from fixtures.env; I wrote it and they pass."
    script_1: list[Step] = [
        ToolUse("ToolSearch", {"query": f"select:{SEARCH}"}),
        ToolUse(SEARCH, {"query": QUERY}),
        ToolUse("Write", {"file_path": str(world.project / "fixtures.env"),
                          "content": "FOO=1\n"}),
        ToolUse("Bash", {"command": CHECK, "description": "run the config test"}),
        Say(final_1),
    ]
    first = drive(clients, world, PROMPT_1, script_1, "Bash", "Write")
    assert first.result["permission_denials"] == [], first.result["permission_denials"]
    text, failed = first.step_result(1)
    assert not failed, text
    assert [r["id"] for r in json.loads(text)["results"]] == [cid], text
    checked, failed = first.step_result(3)
    assert not failed, checked  # the real test passed
    sid = first.session_id

    served = wait_for_line(world, "claim.served", sid, via="search")
    assert served["payload"]["claims"] == [cid], served
    end = session_ended(world, sid)["payload"]
    # the outcome is the capture's own reading of the transcript: the last check passed
    assert (end.get("outcome"), end.get("used")) == ("success", [cid]), world.what_happened()

    report = workers.drain_spool(FLEET)
    dead = list(DeadLetter.objects.values("event_id", "reason", "line"))
    assert not dead and report.dead == 0, f"dead-lettered: {dead}\n{world.what_happened()}"
    claim.refresh_from_db()
    assert (claim.served_sessions, claim.used_sessions, claim.used_succeeded,
            claim.used_partial, claim.used_failed) == (1, 1, 1, 0, 0), world.what_happened()
    use = ClaimUse.objects.get(claim=claim)
    assert (use.session.session_id, use.used) == (sid, True)
    assert "search" in use.via, use.via
    assert Session.objects.get(session_id=sid).outcome == "success"

    browser = Client()
    browser.force_login(moderator)
    page = review_page(browser, claim)
    assert cell(page, "use-served") == "1", cell(page, "use-served")
    assert cell(page, "use-used").startswith("1 "), cell(page, "use-used")
    assert cell(page, "use-outcomes") == "1 succeeded · 0 partial · 0 failed"
    assert 'id="no-feedback"' in page

    # -- session 2: bo says the claim is wrong ------------------------------------------------
    workers.render_fleet(claim.fleet)  # as the worker would after the drain
    before = Claim.objects.get(pk=claim.pk)
    script_2: list[Step] = [
        ToolUse("ToolSearch", {"query": f"select:{FEEDBACK}"}),
        ToolUse(FEEDBACK, {"claim": cid, "verdict": "wrong", "note": NOTE}),
        Say(FINAL_2),
    ]
    second = drive(clients, world, PROMPT_2, script_2, env={"CTXLAKE_AGENT_ID": HOLDER})
    said, failed = second.step_result(1)
    assert not failed and "moderator" in said, said
    sid_2 = second.session_id
    assert sid_2 != sid
    session_ended(world, sid_2)
    spooled = [e for e in world.events() if e["kind"] == "claim.feedback"]
    assert [(e["agent"], e["session"]) for e in spooled] == [(HOLDER, sid_2)], (
        world.what_happened())

    report = workers.drain_spool(FLEET)
    assert report.dead == 0 and not DeadLetter.objects.exists(), world.what_happened()
    fb = ClaimFeedback.objects.get(claim=claim)
    assert (fb.agent.agent_id if fb.agent else None, fb.session.session_id if fb.session
            else None, fb.verdict, fb.note, fb.resolution) == (HOLDER, sid_2, "wrong", NOTE, "")
    after = Claim.objects.get(pk=claim.pk)
    assert (after.status, after.text, after.contested, after.scope) == (
        before.status, before.text, before.contested, before.scope)
    assert (after.used_sessions, after.used_succeeded) == (1, 1)  # session 2 did not use it
    assert after.open_flags == 1  # counted against it, within the rule's bounds
    flagged = rule.confidence(replace(tallies.record(before), flags=1),
                              tallies.fleet_base_rate(after.fleet_id))
    assert after.confidence == flagged < before.confidence

    page = review_page(browser, after)
    feedback = cell(page, "feedback")
    assert HOLDER in feedback and sid_2 in feedback and "wrong" in feedback, feedback
    assert escape(NOTE) in page and "Dismiss" in feedback, feedback  # an open task

    # -- a moderator acts: dismisses it on the page ----------------------------------------
    done = browser.post(reverse("admin:claims_claim_moderate", args=(claim.pk, "feedback")),
                        {"item": fb.pk, "resolution": "dismissed"})
    assert done.status_code == 302, done.content[:500]
    fb.refresh_from_db()
    assert (fb.resolution, fb.resolved_by) == ("dismissed", moderator)
    restored = Claim.objects.get(pk=claim.pk)
    assert (restored.status, restored.open_flags) == (Claim.Status.PROMOTED, 0)
    assert restored.confidence == before.confidence
