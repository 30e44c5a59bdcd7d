"""The real Claude Code CLI, set up by `install --runtime claude-code`, in headless sessions.

Only the model is replaced (messages_standin.py, on 127.0.0.1 via ANTHROPIC_BASE_URL); the
CLI, its MCP client and hooks, and the bridge all run for real. One session checks the
whole path a user meets: the SessionStart hook's briefing reaches the model, the scripted
model loads and calls `mcp__ctxlake__memory_search`, the real bridge answers it from the
fleet's cache, and the SessionEnd hook spools `session.end` for the session.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.config_files import LAUNCHER_MARK
from mcp_bridge.toolspec import TOOLS
from tests.capture_log import wait_until_finished
from tests.realclients import npm_clients
from tests.realclients.claude_session import Ran, drive
from tests.realclients.conftest import (
    AGENT,
    BRIEFING_MARK,
    CLAIM_ID,
    CLAIM_TEXT,
    FLEET,
    HOLDER,
    LEASE_REASON,
    LEASED_GLOB,
    Clients,
    Fleet,
)
from tests.realclients.messages_standin import (
    Recorded,
    Say,
    Step,
    ToolUse,
    tool_id,
)

pytestmark = pytest.mark.slow

PROMPT = "What does this fleet know about Stripe webhooks?"
DONE = "standin: done"
#: The agent's reason after an environment fix: without one, capture proposes nothing.
REASON = "The check reads local.env, which a fresh checkout does not have."
SEARCH = "mcp__ctxlake__memory_search"
#: The model a real session would be: load the deferred MCP tool's schema, then call it.
MEMORY_SCRIPT: list[Step] = [
    ToolUse("ToolSearch", {"query": f"select:{SEARCH}"}),
    ToolUse(SEARCH, {"query": "stripe webhooks retried"}),
    Say(DONE),
]




def run_session(clients: Clients, fleet: Fleet, script: list[Step], *allowed: str) -> Ran:
    return drive(clients, fleet, PROMPT, script, *allowed)


def test_session_briefing_memory_search_and_session_end(clients: Clients, fleet: Fleet) -> None:
    fleet.install("claude-code")
    session = run_session(clients, fleet, MEMORY_SCRIPT)
    first = session.agent_requests()[0]
    pinned = npm_clients.pinned()["@anthropic-ai/claude-code"]
    assert f"claude-cli/{pinned} " in first.headers["user-agent"]
    assert first.headers["x-claude-code-session-id"] == session.result["session_id"]

    # SessionStart: the fleet briefing is in what the CLI sends to the model.
    assert BRIEFING_MARK in first.dump()
    assert session.result["permission_denials"] == []
    # SessionEnd: one session.end for this session, by this agent, written by the capture
    # process the hook starts detached (issue 16): wait for it, then for any second one.
    wait_until_finished(fleet.ctx_home, session=session.result["session_id"])
    ends = [e for e in fleet.events() if e["kind"] == "session.end"]
    assert [(e["session"], e["agent"]) for e in ends] == [(session.result["session_id"], AGENT)]
    assert ends[0]["payload"]["summary"] == f"Asked: {PROMPT}\nConcluded: standin: done"
    log = (fleet.ctx_home / "logs" / "capture.log").read_text()
    assert f"session {session.result['session_id']} (claude-code)" in log

    assert_memory_search_answered(session)


def assert_memory_search_answered(session: Ran) -> None:
    """Steps 0-1 of MEMORY_SCRIPT went through Claude Code to the real bridge and back.

    Claude Code connects MCP servers without blocking the first request and defers their
    tools behind ToolSearch, so the bridge's tools are checked where the model gets them:
    after the ToolSearch step, with the bridge's own input schema.
    """
    last = session.agent_requests()[-1]
    assert last.tool_results().keys() == {tool_id(0), tool_id(1)}
    assert not session.step_result(0)[1]
    offered = [t.get("input_schema") for t in last.body["tools"] if t.get("name") == SEARCH]
    assert offered == [TOOLS["memory_search"]["inputSchema"]], "memory_search is not offered"
    text, failed = session.step_result(1)
    assert not failed, text
    answer = json.loads(text)
    assert [hit["id"] for hit in answer["results"]] == [CLAIM_ID]
    assert answer["results"][0]["text"] == CLAIM_TEXT


#: Loaded by the bridge's interpreter (PYTHONPATH): the MCP SDK's import takes this long,
#: as it does on a loaded machine. The fast `initialize` path does not import it.
SLOW_SDK_IMPORT = """\
import sys, time


class SlowSdk:
    def find_spec(self, name, path=None, target=None):
        if name == "mcp":
            sys.meta_path.remove(self)
            time.sleep({delay})
        return None


sys.meta_path.insert(0, SlowSdk())
"""
#: Longer than Claude Code waits for `server/discover` before it falls back to `initialize`.
SLOW_IMPORT_SECS = 5


def test_session_with_a_slow_sdk_import(clients: Clients, fleet: Fleet, tmp_path: Path,
                                         ) -> None:
    """The start-up race, made certain: the same session with the SDK import held 5 s,
    longer than Claude Code waits for `server/discover` before it falls back to
    `initialize` (it used to end with tools/list refused, -32602, and no ctxlake tools)."""
    slow = tmp_path / "slow-sdk"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_SDK_IMPORT.format(delay=SLOW_IMPORT_SECS))
    python = slow / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{slow}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    fleet.install("claude-code", "--python", str(python))
    assert_memory_search_answered(run_session(clients, fleet, MEMORY_SCRIPT))


def test_pretooluse_warns_before_editing_a_leased_path(clients: Clients, fleet: Fleet) -> None:
    """Another agent's live lease on the edited path reaches the model before the edit."""
    fleet.install("claude-code")
    settings = json.loads((fleet.project / ".claude" / "settings.json").read_text())
    group = settings["hooks"]["PreToolUse"][0]
    assert "Write" in group["matcher"].split("|"), group
    [hook] = group["hooks"]
    # The committed settings run the per-user link (as `.mcp.json` does), not a path.
    assert f"{LAUNCHER_MARK}{FLEET}+claude-code\" hook pre-tool-use" in hook["command"], hook
    # Leases are repo-relative globs: the hook checks a path inside a git work tree only.
    subprocess.run(["git", "init", "-q", str(fleet.project)], check=True, timeout=30)
    target = fleet.project / "src" / "payments" / "webhook.py"
    script: list[Step] = [
        ToolUse("Write", {"file_path": str(target), "content": "RETRIES = 3\n"}),
        Say(DONE),
    ]
    session = run_session(clients, fleet, script, "Write")
    last = session.agent_requests()[-1]
    after = _messages_after(last, tool_id(0))
    assert HOLDER in json.dumps(after) and LEASE_REASON in json.dumps(after), after
    # By way of the hook's additionalContext (a text block of its own, not the tool's result):
    # the edited path, the holder, the glob they hold and why.
    said = f"src/payments/webhook.py is leased by {HOLDER} ({LEASED_GLOB})"
    assert [t for t in _context_texts(after) if said in t and LEASE_REASON in t], after
    assert target.read_text() == "RETRIES = 3\n"  # a warning by default, not a block
    # the session's bridge listened for its hooks (mcp_bridge.hook_door) in the same home
    assert (fleet.ctx_home / "run" / "hooks").is_dir()


def _messages_after(request: Recorded, use_id: str) -> list[Any]:
    """The conversation after the assistant message holding tool_use `use_id`."""
    messages = request.body["messages"]
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("id") == use_id for b in content):
            return list(messages[i + 1:])
    raise AssertionError(f"no tool_use {use_id} in the conversation")


def _context_texts(messages: list[Any]) -> list[str]:
    """The text blocks in `messages` that are not a tool's result (added context)."""
    texts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        texts += [b["text"] for b in content or [] if isinstance(b, dict)
                  and b.get("type") == "text" and isinstance(b.get("text"), str)]
    return texts


def approve_project(fleet: Fleet) -> None:
    """What a user does once in an interactive session: trust the folder, approve the server."""
    state = fleet.home / ".claude.json"
    data = json.loads(state.read_text()) if state.exists() else {}
    data.setdefault("projects", {})[str(fleet.project)] = {"hasTrustDialogAccepted": True}
    state.write_text(json.dumps(data))
    local = fleet.project / ".claude" / "settings.local.json"
    local.write_text(json.dumps({"enabledMcpjsonServers": ["ctxlake"]}))


def mcp_list(clients: Clients, fleet: Fleet) -> str:
    done = subprocess.run([clients.path("claude"), "mcp", "list"], cwd=fleet.project,
                          env=clients.env(fleet.home, DISABLE_TELEMETRY="1",
                                          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_mcp_list_connected_once_approved(clients: Clients, fleet: Fleet) -> None:
    fleet.install("claude-code")
    [pending] = [ln for ln in mcp_list(clients, fleet).splitlines() if ln.startswith("ctxlake:")]
    assert "Pending approval" in pending
    approve_project(fleet)
    [row] = [ln for ln in mcp_list(clients, fleet).splitlines() if ln.startswith("ctxlake:")]
    assert "Connected" in row, row


def test_mcp_list_leaves_no_session(clients: Clients, fleet: Fleet) -> None:
    """`claude mcp list` runs the SessionEnd hook with no real session (issue 15 item 4).

    The hook records only real sessions, so a health check spools nothing.
    """
    fleet.install("claude-code")
    approve_project(fleet)
    assert "Connected" in mcp_list(clients, fleet)
    assert [e["kind"] for e in fleet.events()] == []


def test_session_end_captures_an_error_fix_from_the_real_transcript(
    clients: Clients, fleet: Fleet,
) -> None:
    """Issues 16 and 23 through the real CLI: a check fails, an environment file is
    written, the same check passes; the SessionEnd hook's capture proposes the error→fix,
    citing message uuids that exist in the transcript Claude Code wrote, and records the
    changed path."""
    fleet.install("claude-code")
    subprocess.run(["git", "init", "-q", str(fleet.project)], check=True, timeout=30)
    # not `test -f`: Claude Code reads exit 1 of test/grep/diff as "false", not as an error
    check = "python3 -c \"open('local.env')\""
    script: list[Step] = [
        ToolUse("Bash", {"command": check, "description": "check"}),
        ToolUse("Write", {"file_path": str(fleet.project / "local.env"), "content": "ok\n"}),
        ToolUse("Bash", {"command": check, "description": "check again"}),
        Say(REASON),
    ]
    session = run_session(clients, fleet, script, "Bash", "Write")
    sid = session.result["session_id"]
    wait_until_finished(fleet.ctx_home, session=sid)
    events = fleet.events()
    [end] = [e for e in events if e["kind"] == "session.end"]
    assert end["session"] == sid
    assert (end["payload"]["changed_paths"], end["payload"]["repo"]) == (["local.env"],
                                                                         "project")
    proposed = [e["payload"] for e in events if e["kind"] == "claim.proposed"]
    [fix] = [p for p in proposed if p.get("extractor") == "error_fix"]
    # an environment file the check needs (what the code alone would not show), and why
    assert fix["claim"] == f"`{check}` needs local.env: {REASON}", fix["claim"]
    assert any("FileNotFoundError" in c["excerpt"] for c in fix["evidence"])  # quoted there
    [transcript] = (fleet.home / ".claude" / "projects").glob(f"*/{sid}.jsonl")
    uuids = {json.loads(line).get("uuid") for line in transcript.read_text().splitlines()}
    assert {c["message_id"] for c in fix["evidence"]} <= uuids
    assert {c["session_id"] for c in fix["evidence"]} == {sid}


def test_pretooluse_runs_for_git_commit_and_not_for_other_bash(
    clients: Clients, fleet: Fleet,
) -> None:
    """Issue 26 item 8: Claude Code itself decides (the settings' matcher and `if`), so a
    Bash command that is not a commit spawns no hook; a commit of a leased file is warned."""
    fleet.install("claude-code")
    project = str(fleet.project)
    subprocess.run(["git", "init", "-q", project], check=True, timeout=30)
    target = fleet.project / "src" / "payments" / "webhook.py"
    target.parent.mkdir(parents=True)
    target.write_text("RETRIES = 3\n")
    for args in (["add", "-A"], ["config", "user.email", "t@e"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", project, *args], check=True, timeout=30)
    script: list[Step] = [
        ToolUse("Bash", {"command": "ls src", "description": "list"}),
        ToolUse("Bash", {"command": "git -C . commit --dry-run -q", "description": "check"}),
        ToolUse("Bash", {"command": "git commit -qm 'commit retries'", "description": "ci"}),
        Say(DONE),
    ]
    session = run_session(clients, fleet, script, "Bash")
    last = session.agent_requests()[-1]
    said = f"src/payments/webhook.py is leased by {HOLDER} ({LEASED_GLOB})"
    warned = [sum(said in t for t in _context_texts(_step_messages(last, step)))
              for step in range(3)]
    assert warned == [0, 1, 1], (warned, _hook_lines(session.debug_log))
    spawned = [ln for ln in _hook_lines(session.debug_log)
               if "PreToolUse:Bash" in ln and "hook pre-tool-use] finished" in ln]
    assert len(spawned) == 2, spawned  # once for each commit, never for `ls`


def _step_messages(request: Recorded, step: int) -> list[Any]:
    """The messages between script step `step`'s tool_use and the next step's."""
    after = _messages_after(request, tool_id(step))
    ids = [i for i, m in enumerate(after) if m.get("role") == "assistant"]
    return after[:ids[0]] if ids else after


def _hook_lines(log: str) -> list[str]:
    return [ln[:300] for ln in log.splitlines() if "hook" in ln.lower()]
