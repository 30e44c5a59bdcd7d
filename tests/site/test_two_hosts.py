"""Two agent hosts, one server: a lease travels with a handoff across machines.

Host 1 and host 2 are two CTXLAKE_HOMEs (separate cache and spool), each with a real
bridge process and a real `sync` process talking REST to a live test server. The server
side (drain, render) runs in the test process, as the workers would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ctxlake_site import workers
from fleet import tokens
from fleet.models import Agent, Fleet, Session
from tests.site.test_end_to_end import ROOT, BridgeProcess

INIT = {"protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "two-hosts", "version": "1"}}


class AgentHost:
    def __init__(self, root: Path, fleet: Fleet, agent: Agent, server: str) -> None:
        self.root, self.fleet, self.agent, self.server = root, fleet, agent, server
        self.secret = tokens.issue_token(fleet, role="agent", name=f"{agent.agent_id}-host",
                                         agent=agent).secret
        self.token_file = root / "token"
        root.mkdir(parents=True)
        self.token_file.write_text(self.secret)
        self.token_file.chmod(0o600)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CTXLAKE_") or k == "CTXLAKE_EMBED_SHARED"}
        self.env.update(PYTHONPATH=str(ROOT), CTXLAKE_HOME=str(root / "ctxlake"),
                        CTXLAKE_FLEET_ID=fleet.slug, CTXLAKE_AGENT_ID=agent.agent_id)

    def bridge(self) -> BridgeProcess:
        proc = BridgeProcess(self.env)
        proc.request("initialize", INIT)
        proc.notify("notifications/initialized")
        return proc

    def run(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run([sys.executable, "-m", "mcp_bridge", *args], input=stdin,
                              capture_output=True, env=self.env, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        return done

    def sync(self) -> str:
        return self.run("sync", "--server", self.server, "--token-file", str(self.token_file),
                        "--once").stdout.decode()

    def api(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.server}/api/v1/fleets/{self.fleet.slug}/{path}", method="POST",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.secret}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]


def _serve(fleet: Fleet) -> None:
    report = workers.drain_spool()
    assert report.dead == 0
    workers.render_fleet(fleet)


@pytest.mark.slow
def test_a_lease_handed_off_on_host_1_is_held_by_the_picker_on_host_2(
    transactional_db: None, live_server: Any, tmp_path: Path, settings: Any,
    monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet, ada: Agent, bo: Agent,
) -> None:
    server = tmp_path / "server"
    settings.CTXLAKE_CACHE_DIR, settings.CTXLAKE_SPOOL_DIR = server / "cache", server / "spool"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(server / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(server / "spool"))
    one = AgentHost(tmp_path / "host1", fleet_a, ada, live_server.url)
    two = AgentHost(tmp_path / "host2", fleet_a, bo, live_server.url)

    # Host 1: ada claims, hands off with her leases, and her session ends.
    a = one.bridge()
    a.tool("fleet_claim", paths=["src/payments/**"], reason="refunds", ttl_secs=1800)
    a.tool("fleet_handoff", summary="Refunds half migrated", status="in_progress",
           next="finish refunds.py", transfer_leases=True)
    one.run("hook", "session-end", "--outcome", "partial", "--summary", "handed off to bo",
            stdin=b'{"session_id": "s-ada-1", "reason": "prompt_input_exit"}')
    assert "pushed 3/3 event(s)" in one.sync()
    _serve(fleet_a)

    # Host 2: bo sees the handoff and its offer, picks it up over REST, syncs, holds it.
    two.sync()
    b = two.bridge()
    status = b.tool("fleet_status")
    (handoff,) = status["handoffs"]
    assert handoff["summary"] == "Refunds half migrated"
    assert handoff["offered_leases"] == ["src/payments/**"]
    assert [ag["agent_id"] for ag in status["agents"] if ag["leases"]] == ["ada"]
    pk = int(handoff["id"].removeprefix("h-"))
    picked = two.api(f"handoffs/{pk}/pickup", {"version": handoff["version"], "confirm": True})
    assert picked["picked_up"] is True
    _serve(fleet_a)
    two.sync()
    after = b.tool("fleet_status")
    holders = {ag["agent_id"]: [ls["path"] for ls in ag["leases"]] for ag in after["agents"]}
    assert holders.get("bo") == ["src/payments/**"] and not holders.get("ada")
    assert after["handoffs"] == []

    # Host 1 learns it too, and the session end made it into the fleet's history.
    one.sync()
    seen = a.tool("fleet_status")
    assert {ag["agent_id"]: [ls["path"] for ls in ag["leases"]] for ag in seen["agents"]}[
        "bo"] == ["src/payments/**"]
    session = Session.objects.get(session_id="s-ada-1")
    assert (session.outcome, session.summary, session.agent) == ("partial", "handed off to bo",
                                                                 ada)
    assert session.ended_at is not None
    history = a.tool("fleet_history")["sessions"]
    assert history[0]["session_id"] == "s-ada-1" and history[0]["outcome"] == "partial"
    a.close()
    b.close()
