"""What the capture tests share: the hook's environment and waiting for the detached capture."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from mcp_bridge.config import Config
from mcp_bridge.contract.spool import read_events
from tests.mcp_bridge.stdio import ROOT


def hook_env(config: Config, **extra: str) -> dict[str, str]:
    """A runtime's environment for the hook: this config's fleet and home, nothing of ours or
    of the model's API inherited from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXLAKE_", "ANTHROPIC_"))}
    return {**env, "CTXLAKE_HOME": str(config.home), "CTXLAKE_FLEET_ID": config.fleet,
            "CTXLAKE_AGENT_ID": config.agent, "PYTHONPATH": str(ROOT), **extra}


def wait_for(config: Config, predicate: Callable[[list[dict[str, Any]]], bool],
             what: str) -> list[dict[str, Any]]:
    """The fleet's spooled events once `predicate` holds (and anything written just after)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = read_events(config.spool_dir, config.fleet)
        if predicate(events):
            time.sleep(0.3)
            return read_events(config.spool_dir, config.fleet)
        time.sleep(0.05)
    raise AssertionError(f"{what}: {read_events(config.spool_dir, config.fleet)}")


def wait_for_end(config: Config) -> list[dict[str, Any]]:
    return wait_for(config, lambda ev: any(e["kind"] == "session.end" for e in ev),
                    "no session.end was spooled")
