"""`hook session-start` / `hook session-end`: what a runtime runs at the edges of a session.

A hook runs inside the host's turn, so three rules hold whatever happens:
1. it finishes within ~100 ms: stdlib plus the stdlib-only bridge modules, never the mcp
   SDK (≈0.6 s to import), never numpy, never the snapshot;
2. it never fails the turn: every error goes to stderr and the exit status is 0;
3. it never touches the network: start reads the local cache, end appends to the spool.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
from typing import Any

from mcp_bridge import contract
from mcp_bridge.config import Config
from mcp_bridge.contract import redact

STDIN_WAIT_SECS = 0.05  # a runtime writes its hook JSON at once; don't wait on a silent pipe
MAX_STDIN = 1 << 20
OUTCOMES = contract.SESSION_OUTCOMES


def read_hook_input(stream: Any = None, wait: float = STDIN_WAIT_SECS) -> dict[str, Any]:
    """The runtime's hook JSON from stdin ({} for a terminal, silence or anything not JSON)."""
    stream = sys.stdin if stream is None else stream
    try:
        fd = stream.fileno()
        if os.isatty(fd):
            return {}
        chunks, deadline = [], time.monotonic() + wait
        while sum(map(len, chunks)) < MAX_STDIN:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        value = json.loads(b"".join(chunks) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def session_start(cfg: Config, hook_input: dict[str, Any], *, fmt: str) -> str:
    """The briefing, wrapped the way the runtime wants it on stdout."""
    from mcp_bridge.cache import Cache

    if cfg.problems:
        text = "ctxlake: no briefing (" + "; ".join(cfg.problems) + ")"
    else:
        text = Cache(cfg.fleet_cache, fleet=cfg.fleet).briefing() or (
            f"ctxlake: no briefing rendered yet for fleet {cfg.fleet!r}.")
    if fmt == "plain":
        return text if text.endswith("\n") else text + "\n"
    out = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return json.dumps(out, ensure_ascii=False) + "\n"


MAX_CHANGED_PATHS = 200


def session_end(cfg: Config, hook_input: dict[str, Any], *, outcome: str | None,
                summary: str | None, changed_paths: list[str] | None = None) -> str:
    """Spool a session.end event; returns its id. ValueError says what is missing."""
    from mcp_bridge.contract.spool import Spool

    if cfg.problems:
        raise ValueError("; ".join(cfg.problems))
    session = str(hook_input.get("session_id") or cfg.session or "").strip()[:128]
    if not session:
        raise ValueError("no session id (neither the hook's stdin JSON nor CTXLAKE_SESSION_ID)")
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"--outcome must be one of {', '.join(OUTCOMES)}")
    reason = hook_input.get("reason")
    paths = list(dict.fromkeys(p.strip() for p in changed_paths or [] if p.strip()))
    if len(paths) > MAX_CHANGED_PATHS:
        raise ValueError(f"at most {MAX_CHANGED_PATHS} --changed-path values")
    payload = {"outcome": outcome, "summary": (summary or "").strip()[:4000] or None,
               "reason": reason[:64] if isinstance(reason, str) and reason else None}
    if paths:  # absent when empty, so older drains read the line unchanged
        payload["changed_paths"] = paths
    spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=session,
                  max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
    return spool.append(contract.KIND_SESSION_END, redact.scrub_value(payload)).event_id


def main(argv: list[str], *, command: str = "hook") -> int:
    """Never raises and always exits 0: a hook must not fail the host's turn."""
    try:
        return _main(argv)
    except SystemExit as e:  # argparse's own errors: say them, but still exit 0
        if e.code not in (0, None):
            sys.stderr.write("ctxlake hook: bad arguments (see --help); nothing done\n")
        return 0
    except Exception as e:  # noqa: BLE001 - the whole point: report, never propagate
        sys.stderr.write(f"ctxlake hook: {type(e).__name__}: {e}\n")
        return 0


def _main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mcp_bridge hook")
    p.add_argument("event", choices=("session-start", "session-end"))
    p.add_argument("--format", choices=("claude-code", "plain"), default="claude-code",
                   help="session-start output: Claude Code hook JSON (default) or the text")
    p.add_argument("--outcome", choices=OUTCOMES, default=None)
    p.add_argument("--summary", default=None)
    p.add_argument("--changed-path", action="append", dest="changed_paths", default=None,
                   help="session-end: a repo path this session changed (repeatable); claims "
                        "citing it at an older commit become possibly stale")
    a = p.parse_args(argv)
    cfg, hook_input = Config.from_env(), read_hook_input()
    if a.event == "session-start":
        sys.stdout.write(session_start(cfg, hook_input, fmt=a.format))
        return 0
    try:
        session_end(cfg, hook_input, outcome=a.outcome, summary=a.summary,
                    changed_paths=a.changed_paths)
    except (ValueError, OSError) as e:
        sys.stderr.write(f"ctxlake hook session-end: nothing queued: {e}\n")
    return 0
