from __future__ import annotations

import subprocess
import sys

from mcp_bridge.config import ENV_HELP, Config
from tests.mcp_bridge.stdio import ROOT, bridge_env, run_session


def test_it_documents_both_commands_and_every_env_var() -> None:
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "--help"], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=30)
    assert done.returncode == 0
    assert "serve" in done.stdout and "briefing" in done.stdout
    for name in (*ENV_HELP, "CTXLAKE_HOME", "CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR",
                 "CTXLAKE_FLEET_ID", "CTXLAKE_AGENT_ID", "CTXLAKE_SESSION_ID"):
        assert name in done.stdout


def test_it_prints_the_rendered_briefing(live: Config) -> None:
    done = run_session(live, b"", "briefing")
    assert done.stdout.decode() == "# Fleet briefing\nada holds src/**\n"


def test_it_says_honestly_when_there_is_no_briefing(config: Config) -> None:
    done = run_session(config, b"", "briefing")
    out = done.stdout.decode()
    assert done.returncode == 0 and out.count("\n") == 1 and "no briefing rendered yet" in out


def test_it_rejects_unknown_commands(config: Config) -> None:
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "frobnicate"],
                          capture_output=True, env=bridge_env(config), cwd=ROOT, timeout=30)
    assert done.returncode == 2 and done.stdout == b""
