"""What the capture tests share: the hook's environment and waiting for the detached capture."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from mcp_bridge.config import Config
from mcp_bridge.contract.spool import read_events
from tests.capture_log import wait_until_finished
from tests.mcp_bridge.stdio import ROOT


def hook_env(config: Config, **extra: str) -> dict[str, str]:
    """A runtime's environment for the hook: this config's fleet and home, nothing of ours or
    of the model's API inherited from the test run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXLAKE_", "ANTHROPIC_"))}
    return {**env, "CTXLAKE_HOME": str(config.home), "CTXLAKE_FLEET_ID": config.fleet,
            "CTXLAKE_AGENT_ID": config.agent, "PYTHONPATH": str(ROOT), **extra}


def wait_for(config: Config, predicate: Callable[[list[dict[str, Any]]], bool],
             what: str, *, captures: int = 1) -> list[dict[str, Any]]:
    """The fleet's spooled events once the test's `captures` capture runs have finished
    (capture_log: each says so when it has spooled all it will); `predicate` must hold."""
    wait_until_finished(config.home, captures)
    events = read_events(config.spool_dir, config.fleet)
    assert predicate(events), f"{what}: {events}"
    return events


def wait_for_end(config: Config, *, captures: int = 1) -> list[dict[str, Any]]:
    return wait_for(config, lambda ev: any(e["kind"] == "session.end" for e in ev),
                    "no session.end was spooled", captures=captures)
