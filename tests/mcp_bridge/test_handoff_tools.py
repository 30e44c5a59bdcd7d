"""fleet_pickup and fleet_clear: checked, gated and queued by the bridge, decided by the drain."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mcp_bridge import contract, testing, tools
from mcp_bridge.config import Config
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import read_events
from tests.mcp_bridge.data import AGENT, FLEET, ago

Bridge = tools.Bridge
AGENT_NOTE = {"id": "h-7", "from_agent": "bo", "status": "blocked", "summary": "half done",
              "created_at": ago(hours=1), "source_trust": "agent", "version": 3}
OPERATOR_NOTE = {**AGENT_NOTE, "id": "h-8", "source_trust": "operator", "version": 1}


@pytest.fixture
def rendered(config: Config) -> Config:
    testing.build_cache(
        config.cache_dir, FLEET, snapshot=False, handoffs=[AGENT_NOTE, OPERATOR_NOTE],
        closed_handoffs=[{"id": "h-5", "state": "picked_up", "picked_up_by": "cy",
                          "at": ago(minutes=5), "version": 2}],
        agents=[{"agent_id": AGENT, "leases": [], "refused_handoffs": [
            {"handoff": "h-7", "action": "pickup", "at": ago(minutes=1),
             "reason": "h-7 changed since version 2"}]}])
    return config


def _queued(cfg: Config) -> list[tuple[str, dict[str, Any]]]:
    return [(e["kind"], e["payload"]) for e in read_events(cfg.spool_dir, FLEET)]


def test_the_gate_holds_before_anything_is_queued(rendered: Config, bridge: Bridge) -> None:
    with pytest.raises(tools.Rejected, match="h-7: This handoff was written with source "
                                             "trust 'agent'.*confirm=true. Nothing was queued"):
        tools.fleet_pickup(bridge, "h-7")
    assert _queued(rendered) == []


def test_it_queues_a_confirmed_pickup_at_the_version_it_was_shown(
        rendered: Config, bridge: Bridge) -> None:
    out = tools.fleet_pickup(bridge, "h-7", confirm=True)
    assert _queued(rendered) == [("handoff.pickup",
                                  {"handoff": "h-7", "version": 3, "confirm": True})]
    assert out["message"].startswith(tools.QUEUED) and "yours" in out["message"]
    assert out["refused_before"][0]["reason"] == "h-7 changed since version 2"


def test_an_operators_handoff_needs_no_confirm_and_bare_digits_name_it(
        rendered: Config, bridge: Bridge) -> None:
    tools.fleet_pickup(bridge, " 8 ", version=1)
    tools.fleet_clear(bridge, "h-7")
    assert _queued(rendered) == [("handoff.pickup", {"handoff": "h-8", "version": 1}),
                                 ("handoff.clear", {"handoff": "h-7", "version": 3})]


def test_a_handoff_the_render_shows_closed_is_refused_at_once(
        rendered: Config, bridge: Bridge) -> None:
    with pytest.raises(tools.Rejected, match="h-5 is already picked up by cy at .*nothing was "
                                             "queued"):
        tools.fleet_pickup(bridge, "h-5", version=2, confirm=True)
    assert _queued(rendered) == []


@pytest.mark.parametrize("ref", ["h-0", "h-012", "h-١٢", "12a", "", "h-" + "9" * 19,
                                 "h-7; DROP TABLE", "\u202eh-7"])
def test_it_refuses_what_is_not_a_handoff_id(rendered: Config, bridge: Bridge, ref: str) -> None:
    with pytest.raises(tools.Rejected, match="h-12"):
        tools.fleet_pickup(bridge, ref, version=1, confirm=True)
    assert _queued(rendered) == []


@pytest.mark.parametrize("version", [0, -1, 2**31, 2**80])
def test_it_refuses_versions_the_contract_does_not_take(
        rendered: Config, bridge: Bridge, version: int) -> None:
    with pytest.raises(tools.Rejected, match="version must be from 1 to 2147483647"):
        tools.fleet_clear(bridge, "h-7", version=version)
    assert _queued(rendered) == []


def test_an_unrendered_handoff_needs_its_version(rendered: Config, bridge: Bridge) -> None:
    with pytest.raises(tools.Rejected, match="not among the open handoffs"):
        tools.fleet_clear(bridge, "h-99")
    tools.fleet_clear(bridge, "h-99", version=1)  # left since the render: the drain decides
    assert _queued(rendered) == [("handoff.clear", {"handoff": "h-99", "version": 1})]


def test_fleet_status_gathers_this_agents_refusals_under_yours(
        rendered: Config, bridge: Bridge) -> None:
    status = tools.fleet_status(bridge)
    assert status["yours"]["refused_handoffs"][0]["handoff"] == "h-7"
    assert status["closed_handoffs"][0]["picked_up_by"] == "cy"
    assert [h["id"] for h in status["handoffs"]] == ["h-7", "h-8"]


@pytest.mark.parametrize("payload, problem", [
    ({"handoff": "h-1"}, "version must be an integer"),
    ({"handoff": "h-1", "version": True}, "version must be an integer"),
    ({"handoff": "h-1", "version": 1.0}, "version must be an integer"),
    ({"handoff": 1, "version": 1}, "got a JSON int"),
    ({"handoff": ["h-1"], "version": 1}, "got a JSON list"),
    ({"handoff": "h-1", "version": 1, "confirm": "yes"}, "confirm must be a boolean"),
    ({"handoff": "h-1", "version": 1, "by": "ada"}, "unknown field(s) ['by']"),
])
def test_the_contract_refuses_hostile_payloads(payload: dict[str, Any], problem: str) -> None:
    for kind in (events.KIND_HANDOFF_PICKUP, events.KIND_HANDOFF_CLEAR):
        if kind == events.KIND_HANDOFF_CLEAR and "confirm" in payload:
            continue
        assert problem in (events.problem(kind, payload) or ""), (kind, payload)


def test_the_contract_and_the_cache_name_handoffs_alike() -> None:
    assert events.handoff_pk(events.handoff_ref(12)) == 12
    assert events.KIND_HANDOFF_PICKUP in contract.SPOOL_KINDS
    assert events.pickup_gate("operator", False) is None
    assert events.pickup_gate("ingested", True) is None
    assert "confirm=true" in (events.pickup_gate("ingested", False) or "")


@pytest.mark.parametrize("arguments, said", [
    ({"handoff": "h-7", "version": "3"}, "fleet_pickup.version must be a JSON integer"),
    ({"handoff": "h-7", "confirm": "yes"}, "fleet_pickup.confirm must be a JSON boolean"),
    ({"handoff": 7}, "fleet_pickup.handoff must be a JSON string"),
    ({"version": 3}, "missing required argument(s): handoff"),
    ({"handoff": "h-7", "as_agent": "bo"}, "unknown argument(s): 'as_agent'"),
])
def test_wrongly_typed_arguments_are_a_protocol_error(
        rendered: Config, bridge: Bridge, arguments: dict[str, Any], said: str) -> None:
    from mcp_bridge import fastpath

    with pytest.raises(fastpath.BadCall, match=re.escape(said)):
        fastpath.call_result(bridge, "fleet_pickup", arguments)
    assert _queued(rendered) == []


def test_a_refusal_is_an_error_result_the_model_reads(rendered: Config, bridge: Bridge) -> None:
    from mcp_bridge import fastpath

    result = fastpath.call_result(bridge, "fleet_pickup", {"handoff": "h-7"})
    assert result["isError"] is True and "confirm=true" in result["content"][0]["text"]
