"""One headless `claude -p` session of the real Claude Code CLI, the stand-in as its model.

Shared by the real-client tests: the CLI, its MCP client, its hooks and the bridge all run
for real; only the Messages API is the scripted stand-in (messages_standin.py).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from tests.realclients.conftest import Clients, Fleet
from tests.realclients.messages_standin import (
    Recorded,
    Say,
    Standin,
    Step,
    result_text,
    tool_id,
)


@dataclass(frozen=True)
class Ran:
    """One real Claude Code session: its JSON result, what reached the stand-in, its log."""

    result: dict[str, Any]
    standin: Standin
    debug_log: str

    @property
    def session_id(self) -> str:
        return str(self.result["session_id"])

    def agent_requests(self) -> list[Recorded]:
        requests = self.standin.agent_requests()
        assert requests, f"Claude Code never reached the stand-in: {self.standin.requests}"
        return requests

    def step_result(self, index: int) -> tuple[str, bool]:
        """(text, is_error) of the tool_result Claude Code sent back for script step `index`."""
        block = self.agent_requests()[-1].tool_results().get(tool_id(index))
        assert block is not None, (f"step {index} never got a tool_result; debug log tail:\n"
                                   f"{self.debug_log[-3000:]}")
        return result_text(block), block.get("is_error") is True


def drive(clients: Clients, world: Fleet, prompt: str, script: list[Step],
          *allowed: str, env: dict[str, str] | None = None) -> Ran:
    """Run the session in the world's project; it must end with the script's last words.
    `env`: more variables for the CLI (and so for the bridge and hooks it starts)."""
    final = script[-1]
    assert isinstance(final, Say)
    debug = world.root / f"claude-debug-{len(list(world.root.glob('claude-debug-*')))}.log"
    with Standin(script) as standin:
        env = clients.env(world.home, ANTHROPIC_BASE_URL=standin.url,
                          ANTHROPIC_API_KEY="sk-ant-standin-not-a-key", DISABLE_TELEMETRY="1",
                          DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1",
                          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", **(env or {}))
        done = subprocess.run(
            [clients.path("claude"), "-p", prompt, "--output-format", "json",
             "--allowedTools", ",".join(("mcp__ctxlake", *allowed)), "--debug-file", str(debug)],
            cwd=world.project, env=env, capture_output=True, text=True, timeout=180)
    log = debug.read_text(errors="replace") if debug.exists() else ""
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == final.text, (
        f"{result}\ndebug log tail:\n{log[-3000:]}")
    return Ran(result, standin, log)
