"""The MCP Inspector's CLI, a client nobody here wrote, against the real bridge.

It is given the server entry from the `.mcp.json` that `install --runtime claude-code` wrote
(`--config … --server ctxlake`), so what is checked is the installed entry as a user has it,
under both protocol eras the Inspector speaks: legacy (`initialize` first) and modern
(`server/discover`); its default, auto, picks modern with this bridge.

That `.mcp.json` is committed, so it names the per-user launcher through Claude Code's own
variable expansion (`${HOME}/.ctxlake/bin/ctxlake-mcp-<fleet>`). The Inspector does not read
`.mcp.json` as a runtime does: it spawns `command` verbatim (`spawn ${HOME}/… ENOENT`). So it
gets the entry expanded the way Claude Code expands it when it spawns the server (`${VAR}`
and `${VAR:-default}` from the client's environment; an unset variable without a default is
an error there, and here), in a file of its own beside the project; the launcher that path
points to, written by `install` into this test's HOME, is what the Inspector then runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.toolspec import TOOLS
from tests.realclients.conftest import CLAIM_ID, CLAIM_TEXT, FLEET, Clients, Fleet

pytestmark = pytest.mark.slow
#: "auto" negotiates the modern era with this bridge, so these two cover it.
ERAS = ("legacy", "modern")


#: Claude Code's expansion in `.mcp.json` (command, args, env): `${NAME}`, `${NAME:-default}`.
CLAUDE_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_like_claude_code(value: Any, env: dict[str, str]) -> Any:
    """`value` with every `${VAR}` replaced as Claude Code does when it spawns the server."""
    if isinstance(value, dict):
        return {k: expand_like_claude_code(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_like_claude_code(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        assert default is not None, f"${{{name}}} is unset: Claude Code reports it missing"
        return default

    return CLAUDE_VAR.sub(one, value)


def inspector_config(fleet: Fleet, env: dict[str, str]) -> Path:
    """The installed `.mcp.json` entry, expanded for `env`, as the Inspector's --config."""
    installed = json.loads((fleet.project / ".mcp.json").read_text())["mcpServers"]["ctxlake"]
    link = f".ctxlake/bin/ctxlake-mcp-{FLEET}+claude-code"
    assert installed == {"command": f"${{HOME}}/{link}", "args": []}
    entry = expand_like_claude_code(installed, env)
    launcher = Path(entry["command"])
    assert launcher == fleet.home / link
    assert launcher.is_file() and os.access(launcher, os.X_OK), f"no launcher at {launcher}"
    config = fleet.root / "inspector-mcp.json"
    config.write_text(json.dumps({"mcpServers": {"ctxlake": entry}}))
    return config


def inspect(clients: Clients, fleet: Fleet, era: str, *args: str) -> dict[str, Any]:
    env = clients.env(fleet.home, MCP_INSPECTOR_SECRET_STORE="memory")
    done = subprocess.run(
        [clients.path("mcp-inspector"), "--cli", "--config", str(inspector_config(fleet, env)),
         "--server", "ctxlake", "--protocol-era", era, "--format", "json", *args],
        capture_output=True, text=True, timeout=90, cwd=fleet.project, env=env)
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


def test_memory_search_with_the_hosts_shared_embedder(clients: Clients, fleet: Fleet,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What users run (the suite embeds in each bridge): the bridge the Inspector spawns
    finds no embedder on the host, loads the model, serves it, answers hybrid, and when
    its session ends leaves neither a socket nor a process behind; the next session's
    bridge does the same."""
    from mcp_bridge import embed_service, testing

    testing.build_cache(fleet.ctx_home / "cache", FLEET, vectors="model", claims=[
        testing.claim(CLAIM_ID, CLAIM_TEXT, type="gotcha", subject="payments")])
    monkeypatch.setenv(embed_service.SHARED_ENV, "on")
    fleet.install("claude-code")
    for _ in range(2):
        out = inspect(clients, fleet, "modern", "--method", "tools/call",
                      "--tool-name", "memory_search",
                      "--tool-args-json", json.dumps({"query": "stripe webhooks retried"}))
        answer = out["result"]["structuredContent"]
        assert answer["mode"] == "hybrid", answer.get("note")
        assert [hit["id"] for hit in answer["results"]] == [CLAIM_ID]
        assert not list(embed_service.run_dir(fleet.ctx_home).glob("*.sock"))
        assert embed_service.running(fleet.ctx_home) == []
