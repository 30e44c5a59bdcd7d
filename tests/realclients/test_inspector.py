"""The MCP Inspector's CLI, a client nobody here wrote, against the real bridge.

It reads the server entry from the `.mcp.json` that `install --runtime claude-code` wrote
(`--config … --server ctxlake`), so what is checked is the installed entry as a user has it,
under both protocol eras the Inspector speaks: legacy (`initialize` first) and modern
(`server/discover`); its default, auto, picks modern with this bridge.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from mcp_bridge.toolspec import TOOLS
from tests.realclients.conftest import CLAIM_ID, CLAIM_TEXT, FLEET, Clients, Fleet

pytestmark = pytest.mark.slow
#: "auto" negotiates the modern era with this bridge, so these two cover it.
ERAS = ("legacy", "modern")


def inspect(clients: Clients, fleet: Fleet, era: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [clients.path("mcp-inspector"), "--cli", "--config", str(fleet.project / ".mcp.json"),
         "--server", "ctxlake", "--protocol-era", era, "--format", "json", *args],
        capture_output=True, text=True, timeout=90, cwd=fleet.project,
        env=clients.env(fleet.home, MCP_INSPECTOR_SECRET_STORE="memory"))
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_portable_schemas(clients: Clients, fleet: Fleet, era: str) -> None:
    """Every tool is listed; --strict exits 6 on any error-severity schema portability issue."""
    fleet.install("claude-code")
    out = inspect(clients, fleet, era, "--method", "tools/list", "--strict")
    listed = {tool["name"]: tool for tool in out["result"]["tools"]}
    assert set(listed) == set(TOOLS)
    assert listed["memory_search"]["inputSchema"] == TOOLS["memory_search"]["inputSchema"]


@pytest.mark.parametrize("era", ERAS)
def test_tools_call_memory_search(clients: Clients, fleet: Fleet, era: str) -> None:
    fleet.install("claude-code")
    out = inspect(clients, fleet, era, "--method", "tools/call", "--tool-name", "memory_search",
                  "--tool-args-json", json.dumps({"query": "stripe webhooks retried"}))
    result = out["result"]
    assert result.get("isError") is not True, result
    hits = result["structuredContent"]["results"]
    assert [hit["id"] for hit in hits] == [CLAIM_ID]
    assert hits[0]["text"] == CLAIM_TEXT
    assert CLAIM_TEXT in result["content"][0]["text"]


def test_tools_call_write_reaches_the_spool(clients: Clients, fleet: Fleet) -> None:
    """A write tool called by the Inspector is queued in the spool, as the bridge says."""
    fleet.install("claude-code")
    out = inspect(clients, fleet, "auto", "--method", "tools/call", "--tool-name", "fleet_claim",
                  "--tool-args-json", json.dumps({"paths": ["docs/**"], "reason": "inspector"}))
    answer = out["result"]["structuredContent"]
    assert answer["status"] == "queued for sync"
    [event] = fleet.events()
    assert (event["id"], event["kind"], event["fleet"]) == (answer["event_id"], "lease.claim",
                                                           FLEET)
    assert event["payload"]["paths"] == ["docs/**"]
