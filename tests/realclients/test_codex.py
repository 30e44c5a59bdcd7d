"""The real Codex CLI reads the entry `install --runtime codex` wrote into ~/.codex/config.toml.

`codex mcp list` parses the user config the way a Codex session will (it does not start the
server), so this checks that the written TOML is Codex's own idea of a stdio server: the
command, the arguments and the environment ctxlake needs, enabled.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.realclients.conftest import AGENT, FLEET, ROOT, Clients, Fleet

pytestmark = pytest.mark.slow


def test_codex_mcp_list_shows_the_installed_server(clients: Clients, fleet: Fleet) -> None:
    if "codex" in clients.cannot_run:  # e.g. a platform the package ships no binary for
        pytest.skip(f"the codex binary cannot run here: {clients.cannot_run['codex']}")
    fleet.install("codex")
    done = subprocess.run([clients.path("codex"), "mcp", "list", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=fleet.project,
                          env=clients.env(fleet.home))
    assert done.returncode == 0, done.stderr
    [server] = [s for s in json.loads(done.stdout) if s["name"] == "ctxlake"]
    assert server["enabled"] is True
    transport = server["transport"]
    assert (transport["type"], transport["command"], transport["args"]) == (
        "stdio", sys.executable, ["-m", "mcp_bridge"])
    assert transport["env"] == {"CTXLAKE_FLEET_ID": FLEET, "CTXLAKE_AGENT_ID": AGENT,
                                "PYTHONPATH": str(ROOT), "CTXLAKE_HOME": str(fleet.ctx_home)}

    table = subprocess.run([clients.path("codex"), "mcp", "list"], capture_output=True,
                           text=True, timeout=60, cwd=fleet.project, env=clients.env(fleet.home))
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if line.startswith("ctxlake ")]
    assert "enabled" in row.split()
