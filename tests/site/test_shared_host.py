"""One agent host, several agents, one host token: the real `sync` relays them all.

The host is one CTXLAKE_HOME (one spool, one cache) with a real bridge process per agent
and the real `python -m mcp_bridge sync` talking REST to a live test server, as a shared
build box would run them. The token lists ada and bo; dee (this fleet's agent, on another
host) and cy (another fleet's agent) also write into the host's spool: their lines are
refused one by one and kept in rejected/, and ada's and bo's are applied. Then the sync
loop, woken by the change feed (a long-poll with the same host token), brings a later
write of bo's to the server and the server's render back, with no polling interval
reached. The server side (drain, render) runs in the test process, as the workers would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ctxlake_site import workers
from fleet import change_feed, leases, tokens
from fleet.models import Agent, AppliedEvent, Fleet, InboxEvent, Lease
from tests.helpers import until
from tests.site.test_end_to_end import ROOT, BridgeProcess
from tests.site.test_two_hosts import INIT


class SharedHost:
    def __init__(self, root: Path, fleet: Fleet, secret: str, server: str) -> None:
        self.root, self.fleet, self.server = root, fleet, server
        root.mkdir(parents=True)
        self.token_file = root / "token"
        self.token_file.write_text(secret)
        self.token_file.chmod(0o600)
        self.home = root / "ctxlake"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CTXLAKE_") or k == "CTXLAKE_EMBED_SHARED"}
        self.env.update(PYTHONPATH=str(ROOT), CTXLAKE_HOME=str(self.home),
                        CTXLAKE_FLEET_ID=fleet.slug)

    def bridge(self, agent_id: str) -> BridgeProcess:
        proc = BridgeProcess({**self.env, "CTXLAKE_AGENT_ID": agent_id,
                              "CTXLAKE_SESSION_ID": f"s-{agent_id}"})
        proc.request("initialize", INIT)
        proc.notify("notifications/initialized")
        return proc

    def sync_args(self, *mode: str) -> list[str]:
        return [sys.executable, "-m", "mcp_bridge", "sync", "--server", self.server,
                "--token-file", str(self.token_file), *mode]

    def sync_once(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.sync_args("--once"), capture_output=True, text=True,
                              env=self.env, cwd=ROOT, timeout=60)

    def spool_lines(self) -> list[dict[str, Any]]:
        path = self.home / "spool" / "mcp" / f"{self.fleet.slug}.ndjson"
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def rejected(self) -> list[dict[str, Any]]:
        path = self.home / "spool" / "rejected" / f"{self.fleet.slug}.ndjson"
        return [json.loads(line) for line in path.read_text().splitlines()]


def _serve(fleet: Fleet) -> None:
    report = workers.drain_spool()
    assert report.dead == 0
    workers.render_fleet(fleet)


_until = partial(until, secs=120)


def _holders(bridge: BridgeProcess) -> dict[str, list[str]]:
    status = bridge.tool("fleet_status")
    return {a["agent_id"]: sorted(ls["path"] for ls in a["leases"]) for a in status["agents"]
            if a["leases"]}


@pytest.mark.slow
def test_one_host_token_relays_two_agents_and_refuses_the_others_line_by_line(
    transactional_db: None, live_server: Any, tmp_path: Path, settings: Any,
    monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet, fleet_b: Fleet, ada: Agent, bo: Agent,
    cy: Agent,
) -> None:
    server = tmp_path / "server"
    settings.CTXLAKE_CACHE_DIR, settings.CTXLAKE_SPOOL_DIR = server / "cache", server / "spool"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(server / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(server / "spool"))
    Agent.objects.create(fleet=fleet_a, agent_id="dee", host="dee-laptop")
    secret = tokens.issue_token(fleet_a, role="host", name="build-1", relays=[ada, bo]).secret
    host = SharedHost(tmp_path / "build-1", fleet_a, secret, live_server.url)

    # Four bridges share the host's spool; the token lists two of their agents.
    a, b, d, c = (host.bridge(name) for name in ("ada", "bo", "dee", "cy"))
    a.tool("fleet_claim", paths=["src/a/**"], reason="a's work", ttl_secs=1800)
    b.tool("fleet_claim", paths=["src/b/**"], reason="b's work", ttl_secs=1800)
    d.tool("fleet_claim", paths=["src/d/**"], reason="not this host's", ttl_secs=1800)
    c.tool("fleet_claim", paths=["src/c/**"], reason="not this fleet's", ttl_secs=1800)
    written = {line["agent"]: line["id"] for line in host.spool_lines()}
    assert set(written) == {"ada", "bo", "dee", "cy"}

    once = host.sync_once()
    assert once.returncode == 3, once.stderr  # some lines were refused: --once says so
    assert "pushed 2/4 event(s), 2 rejected" in once.stdout
    assert "2 line(s) NOT delivered" in once.stderr and "host token" in once.stderr
    assert host.spool_lines() == []  # every line settled: delivered, or kept in rejected/
    kept = {json.loads(r["line"])["agent"]: r["reason"] for r in host.rejected()}
    assert set(kept) == {"dee", "cy"}
    assert "dee is not registered for host token 'build-1'" in kept["dee"]
    assert "cy is not an agent of this fleet" in kept["cy"]
    inbox = InboxEvent.objects.filter(fleet=fleet_a)
    assert {str(e) for e in inbox.values_list("event_id", flat=True)} == {
        written["ada"], written["bo"]}

    _serve(fleet_a)
    assert {str(e) for e in AppliedEvent.objects.values_list("event_id", flat=True)} == {
        written["ada"], written["bo"]}
    assert host.sync_once().returncode == 0
    expected = {"ada": ["src/a/**"], "bo": ["src/b/**"]}
    assert _holders(a) == _holders(b) == expected
    assert not Lease.objects.filter(agent__agent_id__in=["dee", "cy"]).exists()

    # The loop, on the same token, waits on the change feed (interval far away): a render
    # wakes it, it pushes bo's new line, and the next render reaches the host's cache.
    log = tmp_path / "sync-loop.log"
    with open(log, "w") as err:
        loop = subprocess.Popen(host.sync_args("--interval", "3600"), env=host.env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        _until(lambda: change_feed.FEED.counts()[0] == 1, "the sync loop's long-poll to wait")
        b.tool("fleet_claim", paths=["docs/**"], reason="b again", ttl_secs=1800)
        leases.claim_paths(ada, ["src/a2/**"], reason="from the server side")
        workers.render_fleet(fleet_a)  # a new version: the waiting long-poll answers
        _until(lambda: InboxEvent.objects.filter(fleet=fleet_a).exists(),
               "the loop to push bo's new line")
        _serve(fleet_a)
        _until(lambda: _holders(b).get("bo") == ["docs/**", "src/b/**"],
               "the loop to pull the render holding bo's new lease")
        assert _holders(a)["ada"] == ["src/a/**", "src/a2/**"]
    finally:
        loop.terminate()
        loop.wait(timeout=30)
        # The killed loop's long-poll is still parked in the live server (until its `wait`):
        # a render wakes it, so the next test starts with no waiter of ours counted.
        workers.render_fleet(fleet_a)
        _until(lambda: change_feed.FEED.counts()[0] == 0, "the orphaned long-poll to leave")
        change_feed.FEED.stop()
        for bridge in (a, b, d, c):
            bridge.close()
    assert "NOT delivered" not in log.read_text()
