"""A handoff taken through MCP by the real Claude Code CLI (issue 26, item 1).

bo leaves a handoff offering his lease; ada's Claude Code session (the Messages stand-in as
its model) calls `fleet_pickup`: without `confirm` the pickup gate stops it before anything
is queued, with it the pickup is queued; the real drain applies it through fleet.actions
and renders. A second agent's session, after that render, asks for the same handoff and
is refused, with who took it. Only the model is replaced.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from ctxlake_site import workers
from fleet import actions
from fleet.models import Agent, Handoff, Lease
from fleet.models import Fleet as FleetRow
from mcp_bridge.contract import events
from tests.realclients.claude_session import drive
from tests.realclients.conftest import AGENT, FLEET, HOLDER, LEASED_GLOB, Clients, Fleet
from tests.realclients.messages_standin import Say, Step, ToolUse

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PICKUP = "mcp__ctxlake__fleet_pickup"
PROMPT = "Pick up bo's open handoff."
DONE = "standin: handoff taken"
SECOND = "di"  # another agent of the fleet, on this machine


def bo_hands_over() -> tuple[FleetRow, str]:
    fleet = FleetRow.objects.create(slug=FLEET, name="Real clients", memory_mode="live")
    bo = Agent.objects.create(fleet=fleet, agent_id=HOLDER, runtime="claude-code")
    Lease.objects.create(fleet=fleet, agent=bo, path=LEASED_GLOB, reason="webhook retries",
                         expires_at=timezone.now() + timedelta(hours=1))
    note = Handoff(fleet=fleet, from_agent=bo, summary="Webhook retries half done.",
                   status=Handoff.Status.IN_PROGRESS, next_steps="Finish the backoff test.")
    ((handoff, _),) = actions.create_handoffs(fleet, [(note, timezone.now())])
    workers.render_fleet(fleet)
    return fleet, events.handoff_ref(handoff.pk)


def test_claude_code_takes_a_handoff_through_mcp_and_a_latecomer_is_told(
    clients: Clients, server_world: Fleet,
) -> None:
    fleet, ref = bo_hands_over()
    server_world.install("claude-code")
    script: list[Step] = [
        ToolUse("ToolSearch", {"query": f"select:{PICKUP}"}),
        ToolUse(PICKUP, {"handoff": ref}),
        ToolUse(PICKUP, {"handoff": ref, "confirm": True}),
        Say(DONE),
    ]
    ada = drive(clients, server_world, PROMPT, script)

    gated, failed = ada.step_result(1)  # the gate: an agent's note is data until confirmed
    assert failed and "source trust 'agent'" in gated and "Nothing was queued" in gated, gated
    queued, failed = ada.step_result(2)
    assert not failed and json.loads(queued)["message"].startswith("Queued for sync"), queued
    pickups = [e for e in server_world.events() if e["kind"] == "handoff.pickup"]
    assert [(e["agent"], e["payload"]) for e in pickups] == [
        (AGENT, {"handoff": ref, "version": 1, "confirm": True})]
    assert Handoff.objects.get(fleet=fleet).state == "pending"  # queued is not done

    report = workers.drain_spool(FLEET)
    assert report.dead == 0, report
    workers.render_fleet(fleet)
    handoff = Handoff.objects.get(fleet=fleet)
    assert (handoff.state, handoff.picked_up_by.agent_id) == ("picked_up", AGENT)  # type: ignore[union-attr]
    assert list(Lease.objects.active().values_list("agent__agent_id", "path")) == [
        (AGENT, LEASED_GLOB)]

    late: list[Step] = [
        ToolUse("ToolSearch", {"query": f"select:{PICKUP}"}),
        ToolUse(PICKUP, {"handoff": ref, "confirm": True}),
        Say(DONE),
    ]
    di = drive(clients, server_world, PROMPT, late, env={"CTXLAKE_AGENT_ID": SECOND})
    told, failed = di.step_result(1)
    assert failed and f"{ref} is already picked up by {AGENT}" in told, told
    assert [e["agent"] for e in server_world.events() if e["kind"] == "handoff.pickup"] == [AGENT]
