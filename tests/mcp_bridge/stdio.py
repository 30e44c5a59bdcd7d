"""Helpers to run the real bridge process (python -m mcp_bridge) in tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_bridge.config import Config

ROOT = Path(__file__).resolve().parents[2]


def bridge_env(cfg: Config, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLAKE_") or k == "CTXLAKE_EMBED_SHARED"}
    env.update({"PYTHONPATH": str(ROOT), "CTXLAKE_CACHE_DIR": str(cfg.cache_dir),
                "CTXLAKE_SPOOL_DIR": str(cfg.spool_dir), "CTXLAKE_FLEET_ID": cfg.fleet,
                "CTXLAKE_AGENT_ID": cfg.agent, **extra})
    return env


def frame(id_: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        body["id"] = id_
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


def call(id_: Any, tool: str, arguments: dict[str, Any]) -> bytes:
    return frame(id_, "tools/call", {"name": tool, "arguments": arguments})


INIT = frame(1, "initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                               "clientInfo": {"name": "pytest", "version": "1"}})


def run_session(cfg: Config, stdin: bytes, *args: str, timeout: float = 60,
                ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "mcp_bridge", *args], input=stdin,
                          capture_output=True, env=bridge_env(cfg), timeout=timeout, cwd=ROOT)
