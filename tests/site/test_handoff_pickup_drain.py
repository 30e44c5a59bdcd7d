"""A handoff taken through the bridge: fleet_pickup and fleet_clear, queued, drained through
fleet.actions, rendered, and read back by the agents' own bridges (one machine's spool and
cache, as in production)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from ctxlake_site import workers
from fleet import actions, handoffs
from fleet.models import Activity, Agent, DeadLetter, Fleet, Handoff, Lease
from mcp_bridge import tools
from mcp_bridge.config import Config
from mcp_bridge.contract import events


def bridge_of(agent: str, fleet: Fleet, spool_dir: Path) -> tools.Bridge:
    cache_dir = spool_dir.parent / "cache"
    return tools.Bridge.from_config(Config.from_env({
        "CTXLAKE_HOME": str(spool_dir.parent), "CTXLAKE_SPOOL_DIR": str(spool_dir),
        "CTXLAKE_CACHE_DIR": str(cache_dir), "CTXLAKE_FLEET_ID": fleet.slug,
        "CTXLAKE_AGENT_ID": agent, "CTXLAKE_SESSION_ID": f"{agent}-s1"}))  # one process each


def left_by(agent: Agent, *, offer: bool = False) -> Handoff:
    note = Handoff(fleet=agent.fleet, from_agent=agent, summary="refunds half done",
                   status=Handoff.Status.BLOCKED, source_trust=Handoff.SourceTrust.AGENT)
    ((handoff, _),) = actions.create_handoffs(agent.fleet, [(note, timezone.now() if offer
                                                             else None)])
    return handoff


def drain_and_render(fleet: Fleet) -> None:
    workers.drain_spool(fleet.slug)
    workers.render_fleet(fleet)


def test_two_agents_race_for_a_handoff_and_the_loser_is_told(
        fleet_a: Fleet, ada: Agent, spool_dir: Path) -> None:
    Lease.objects.create(fleet=fleet_a, agent=ada, path="src/payments/**", reason="refunds",
                         expires_at=timezone.now() + timedelta(hours=1))
    ref = events.handoff_ref(left_by(ada, offer=True).pk)
    workers.render_fleet(fleet_a)
    bo, di = bridge_of("bo", fleet_a, spool_dir), bridge_of("di", fleet_a, spool_dir)

    with pytest.raises(tools.Rejected, match="confirm=true"):  # the gate, before the spool
        tools.fleet_pickup(bo, ref)
    tools.fleet_pickup(bo, ref, confirm=True)
    tools.fleet_pickup(di, ref, confirm=True)  # the same render: neither knows of the other
    drain_and_render(fleet_a)

    handoff = Handoff.objects.get(pk=events.handoff_pk(ref))
    assert (handoff.state, handoff.picked_up_by.agent_id, handoff.version) == (  # type: ignore[union-attr]
        "picked_up", "bo", 2)
    assert not DeadLetter.objects.exists()
    assert list(Lease.objects.active().values_list("agent__agent_id", "path")) == [
        ("bo", "src/payments/**")]
    seen_by_bo = tools.fleet_status(bo)
    assert seen_by_bo["handoffs"] == [] and "refused_handoffs" not in seen_by_bo["yours"]
    [told] = seen_by_bo["yours"]["incidents"]  # di's refused pickup, told to the taker
    assert told["kind"] == "pickup_refused" and told["by"] == "di"
    assert [ls["path"] for a in seen_by_bo["agents"] if a["agent_id"] == "bo"
            for ls in a["leases"]] == ["src/payments/**"]
    [refusal] = tools.fleet_status(di)["yours"]["refused_handoffs"]
    assert (refusal["handoff"], refusal["action"]) == (ref, "pickup")
    assert refusal["reason"] == f"{ref} was already picked up by bo"
    with pytest.raises(tools.Rejected, match=f"{ref} is already picked up by bo"):
        tools.fleet_pickup(di, ref, confirm=True)  # after the render: told at once


def test_the_server_holds_the_gate_when_the_bridge_could_not(
        fleet_a: Fleet, ada: Agent, spool_dir: Path) -> None:
    ref = events.handoff_ref(left_by(ada).pk)  # not rendered: the bridge cannot see its trust
    tools.fleet_pickup(bridge_of("bo", fleet_a, spool_dir), ref, version=1)
    drain_and_render(fleet_a)
    assert Handoff.objects.get(pk=events.handoff_pk(ref)).state == "pending"
    [refusal] = tools.fleet_status(bridge_of("bo", fleet_a, spool_dir))["yours"][
        "refused_handoffs"]
    assert "source trust 'agent'" in refusal["reason"] and "confirm=true" in refusal["reason"]
    assert Activity.objects.filter(verb=handoffs.PICKUP_REFUSED, agent__agent_id="bo").count() == 1


def test_a_clear_on_a_stale_version_is_refused_and_a_current_one_applies(
        fleet_a: Fleet, ada: Agent, spool_dir: Path) -> None:
    handoff = left_by(ada)
    ref = events.handoff_ref(handoff.pk)
    workers.render_fleet(fleet_a)
    ada_bridge = bridge_of("ada", fleet_a, spool_dir)
    tools.fleet_clear(ada_bridge, ref, version=7)
    tools.fleet_clear(ada_bridge, ref)  # the version fleet_status showed: 1
    tools.fleet_clear(ada_bridge, "h-999999", version=1)
    drain_and_render(fleet_a)
    handoff.refresh_from_db()
    assert (handoff.state, handoff.version) == ("cleared", 2)
    reasons = [r["reason"] for r in tools.fleet_status(ada_bridge)["yours"]["refused_handoffs"]]
    assert reasons == ["no handoff h-999999 in this fleet",
                       f"{ref} changed since version 7 (it is at 1): read it again in "
                       "fleet_status and retry"]
    assert tools.fleet_status(ada_bridge)["closed_handoffs"][0]["state"] == "cleared"
