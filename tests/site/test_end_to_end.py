"""The whole loop with real parts: a real bridge process, the drain, the gate, the render.

The same bridge process writes (fleet_claim, fleet_handoff, memory_propose), the drain
applies its spool to Postgres, a moderator promotes the claim, the cache is rendered, and
the bridge then sees all three — the claim in live mode, nothing (but enabled) in shadow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from claims import moderation
from claims.models import Claim
from ctxlake_site import workers
from fleet.models import Fleet, FleetModerator

ROOT = Path(__file__).resolve().parents[2]


class BridgeProcess:
    """A line-oriented JSON-RPC driver for `python -m mcp_bridge` over real pipes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_bridge"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        frame = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(frame).encode() + b"\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        assert answer["id"] == self.next_id, answer
        return answer

    def notify(self, method: str) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")
        self.proc.stdin.flush()

    def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        answer = self.request("tools/call", {"name": name, "arguments": arguments})
        result = answer["result"]
        assert not result.get("isError"), result
        return result["structuredContent"]

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture
def bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet
) -> Iterator[BridgeProcess]:
    cache, spool = tmp_path / "cache", tmp_path / "spool"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(cache))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(spool))
    env = {
        **os.environ,
        "CTXLAKE_FLEET_ID": fleet_a.slug,
        "CTXLAKE_AGENT_ID": "ada",
        "CTXLAKE_SESSION_ID": "s-e2e",
        "CTXLAKE_CACHE_DIR": str(cache),
        "CTXLAKE_SPOOL_DIR": str(spool),
    }
    proc = BridgeProcess(env)
    proc.request(
        "initialize",
        {
            "protocolVersion": "2024-11-05",
            "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"},
        },
    )
    proc.notify("notifications/initialized")
    yield proc
    proc.close()


def _round_trip(bridge: BridgeProcess, fleet: Fleet, moderator: User) -> None:
    queued = bridge.tool("fleet_claim", paths=["src/payments/**"], reason="refund flow")
    assert queued["status"] == "queued for sync"
    bridge.tool(
        "fleet_handoff", summary="Refunds half migrated", status="blocked", next="finish refunds.py"
    )
    bridge.tool(
        "memory_propose",
        claim="The refund tests need the ledger mock running",
        type="gotcha",
        subject="payments",
        evidence=[{"session_id": "s-e2e", "message_id": "m-1", "path": "src/payments/tests.py"}],
    )
    report = workers.drain_spool()
    assert (report.applied, report.dead) == (3, 0)
    moderation.promote_claim(Claim.objects.get(fleet=fleet), by=moderator)
    workers.render_fleet(fleet)


@pytest.mark.slow
def test_a_live_fleet_sees_its_lease_handoff_and_promoted_claim(
    bridge: BridgeProcess, fleet_a: Fleet, mod: User
) -> None:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    _round_trip(bridge, fleet_a, mod)
    status = bridge.tool("fleet_status")
    (ada,) = status["agents"]
    assert [lease["path"] for lease in ada["leases"]] == ["src/payments/**"]
    assert status["handoffs"][0]["summary"] == "Refunds half migrated"
    found = bridge.tool("memory_search", query="refund tests ledger mock")
    assert found["enabled"] is True
    assert found["results"][0]["id"] == "cc-01"
    assert "1 independent session" in json.dumps(found)


@pytest.mark.slow
def test_a_shadow_fleet_renders_but_shows_agents_no_claims(
    bridge: BridgeProcess, fleet_a: Fleet, mod: User
) -> None:
    fleet_a.memory_mode = Fleet.MemoryMode.SHADOW
    fleet_a.save()
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    _round_trip(bridge, fleet_a, mod)
    found = bridge.tool("memory_search", query="refund tests ledger mock")
    assert (found["enabled"], found["results"]) == (True, [])
    assert bridge.tool("fleet_status")["agents"][0]["agent_id"] == "ada"
